"""SEW-D: shared keys with log buckets and a normalised table (the defaults), separate
position projections over plain distances, c2p alone, no relative attention; squeeze
2 on an odd frame count and 3 with an even position-conv kernel, every head."""

from audio_encoder_cases.wav2vec2 import HEADS, WAV2VEC2

# 79 frames squeezed to 39: distances up to 38, beyond both spans below (clipped).
SEW_D = dict(
    WAV2VEC2,
    squeeze_factor=2,
    num_conv_pos_embeddings=15,
    max_position_embeddings=24,
    position_buckets=8,
)

CASES = {
    "sew-d-shared-key-buckets": (
        "sew-d",
        dict(SEW_D, feat_extract_norm="group"),
        dict(heads=HEADS),
    ),
    "sew-d-separate-keys-no-buckets-squeeze-3-weighted-sum": (
        "sew-d",
        dict(
            SEW_D,
            feat_extract_norm="layer",
            conv_dim=(16, 16, 32),
            squeeze_factor=3,
            num_conv_pos_embeddings=16,
            share_att_key=False,
            position_buckets=-1,
            max_position_embeddings=10,
            norm_rel_ebd="none",
            use_weighted_layer_sum=True,
        ),
        dict(heads=HEADS),
    ),
    "sew-d-separate-keys-c2p": (
        "sew-d",
        dict(SEW_D, share_att_key=False, pos_att_type=["c2p"]),
    ),
    "sew-d-separate-keys-p2c": (
        "sew-d",
        dict(SEW_D, share_att_key=False, pos_att_type=["p2c"], hidden_act="gelu_new"),
    ),
    "sew-d-no-relative-attention": (
        "sew-d",
        dict(SEW_D, relative_attention=False),
    ),
}
