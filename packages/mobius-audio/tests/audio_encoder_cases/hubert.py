"""HuBERT: post-LN with the projection LayerNorm off, and stable layer norm with it."""

from audio_encoder_cases.wav2vec2 import HEADS, WAV2VEC2

CASES = {
    "hubert-group-norm-no-proj-norm": (
        "hubert",
        dict(WAV2VEC2, feat_extract_norm="group", feat_proj_layer_norm=False),
        dict(heads=HEADS),
    ),
    "hubert-stable-layer-norm": (
        "hubert",
        dict(
            WAV2VEC2,
            feat_extract_norm="layer",
            do_stable_layer_norm=True,
            use_weighted_layer_sum=True,
        ),
        dict(heads=HEADS),
    ),
}
