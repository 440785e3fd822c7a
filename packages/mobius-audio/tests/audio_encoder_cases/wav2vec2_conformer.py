"""Wav2Vec2-Conformer: relative, rotary and no position embeddings; every head; the weighted layer sum."""

from audio_encoder_cases.wav2vec2 import HEADS, SPEAKER_OPTIONS, WAV2VEC2, XVECTOR

CONFORMER = dict(
    WAV2VEC2,
    feat_extract_norm="layer",
    conv_depthwise_kernel_size=5,
    hidden_act="swish",
    layer_norm_eps=1e-6,  # the blocks keep 1e-5: a wrong eps shows
)

CASES = {
    "wav2vec2-conformer-relative": (
        "wav2vec2-conformer",
        dict(CONFORMER, position_embeddings_type="relative"),
        dict(heads=HEADS),
    ),
    "wav2vec2-conformer-rotary-weighted-sum": (
        "wav2vec2-conformer",
        dict(
            CONFORMER,
            position_embeddings_type="rotary",
            rotary_embedding_base=500,
            feat_extract_norm="group",
            use_weighted_layer_sum=True,
        ),
        dict(heads=HEADS),
    ),
    "wav2vec2-conformer-no-positions": (
        "wav2vec2-conformer",
        dict(CONFORMER, position_embeddings_type=None, conv_depthwise_kernel_size=3),
        dict(heads=("none",)),
    ),
    "wav2vec2-conformer-speaker-heads": (
        "wav2vec2-conformer",
        dict(CONFORMER, **XVECTOR, position_embeddings_type="rotary", use_weighted_layer_sum=True),
        SPEAKER_OPTIONS,
    ),
}
