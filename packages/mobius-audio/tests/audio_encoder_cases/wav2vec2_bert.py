"""Wav2Vec2-BERT: relative_key, relative, rotary and no positions; every head; the weighted sum.

The inputs are SeamlessM4T's stacked fbank frames (160 features); 0.5 s and
0.35 s of audio give 24 and 16 real frames, past ``left_max_position_embeddings``
so the distance clamp is exercised.
"""

from audio_encoder_cases.wav2vec2 import HEADS, SPEAKER_HEADS, XVECTOR

BERT = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    feature_projection_input_dim=160,
    conv_depthwise_kernel_size=5,
    left_max_position_embeddings=5,
    right_max_position_embeddings=3,
    layer_norm_eps=1e-6,
    vocab_size=12,
    num_labels=3,
    classifier_proj_size=20,
)
OPTIONS = dict(heads=HEADS, lengths=(8000, 5600))

CASES = {
    "wav2vec2-bert-relative-key": (
        "wav2vec2-bert",
        dict(BERT, position_embeddings_type="relative_key"),
        OPTIONS,
    ),
    "wav2vec2-bert-relative-weighted-sum": (
        "wav2vec2-bert",
        dict(BERT, position_embeddings_type="relative", use_weighted_layer_sum=True),
        OPTIONS,
    ),
    "wav2vec2-bert-rotary": (
        "wav2vec2-bert",
        dict(BERT, position_embeddings_type="rotary", rotary_embedding_base=500, hidden_act="gelu"),
        OPTIONS,
    ),
    "wav2vec2-bert-no-positions": (
        "wav2vec2-bert",
        dict(BERT, position_embeddings_type=None, conv_depthwise_kernel_size=3),
        dict(OPTIONS, heads=("none",)),
    ),
    "wav2vec2-bert-speaker-heads": (
        "wav2vec2-bert",
        dict(BERT, **XVECTOR, position_embeddings_type="relative_key", use_weighted_layer_sum=True),
        dict(OPTIONS, heads=SPEAKER_HEADS, eps=("default",)),
    ),
}
