"""Wav2Vec2: group vs layer conv norm, post-LN vs stable (pre-LN) layers, the CTC and seq-cls heads."""

WAV2VEC2 = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    conv_dim=(16, 16, 24),
    conv_kernel=(10, 3, 3),
    conv_stride=(5, 2, 2),
    conv_bias=True,
    num_conv_pos_embeddings=16,
    num_conv_pos_embedding_groups=4,
    vocab_size=12,
    num_labels=3,
    classifier_proj_size=20,
)
HEADS = ("none", "ctc", "sequence-classification")
#: The frame (diarization) and x-vector (speaker) heads, tiny: a dilated TDNN layer makes
#: transformers count frames past a row's audio, and past the longer row's (capped).
SPEAKER_HEADS = ("audio-frame-classification", "xvector")
XVECTOR = dict(
    tdnn_dim=(8, 12),
    tdnn_kernel=(3, 2),
    tdnn_dilation=(2, 1),
    xvector_output_dim=6,
    initializer_range=0.3,
)
SPEAKER_OPTIONS = dict(heads=SPEAKER_HEADS, eps=("default",))

CASES = {
    "wav2vec2-group-norm": (
        "wav2vec2",
        dict(WAV2VEC2, feat_extract_norm="group"),
        dict(heads=HEADS),
    ),
    "wav2vec2-stable-layer-norm": (
        "wav2vec2",
        dict(
            WAV2VEC2,
            feat_extract_norm="layer",
            do_stable_layer_norm=True,
            num_conv_pos_embeddings=15,
            conv_bias=False,
        ),
        dict(heads=HEADS),
    ),
    "wav2vec2-weighted-layer-sum": (
        "wav2vec2",
        dict(WAV2VEC2, feat_extract_norm="layer", use_weighted_layer_sum=True),
        dict(heads=("sequence-classification",)),
    ),
    "wav2vec2-stable-weighted-layer-sum": (
        "wav2vec2",
        dict(
            WAV2VEC2,
            feat_extract_norm="layer",
            do_stable_layer_norm=True,
            use_weighted_layer_sum=True,
        ),
        dict(heads=("sequence-classification",)),
    ),
    "wav2vec2-speaker-heads": (
        "wav2vec2",
        dict(WAV2VEC2, **XVECTOR, feat_extract_norm="group", use_weighted_layer_sum=True),
        SPEAKER_OPTIONS,
    ),
}
