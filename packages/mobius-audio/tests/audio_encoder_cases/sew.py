"""SEW: squeeze 2 on an odd frame count (79: the last frame padded back), squeeze 3 with
an even position-conv kernel, with and without the feature projection, every head."""

from audio_encoder_cases.wav2vec2 import HEADS, WAV2VEC2

SEW = dict(WAV2VEC2, squeeze_factor=2, num_conv_pos_embeddings=15)

CASES = {
    "sew-group-norm-projected": (
        "sew",
        dict(SEW, feat_extract_norm="group"),
        dict(heads=HEADS),
    ),
    "sew-layer-norm-squeeze-3-even-kernel-weighted-sum": (
        "sew",
        dict(
            SEW,
            feat_extract_norm="layer",
            conv_dim=(16, 16, 32),
            squeeze_factor=3,
            num_conv_pos_embeddings=16,
            use_weighted_layer_sum=True,
            conv_bias=False,
        ),
        dict(heads=HEADS),
    ),
}
