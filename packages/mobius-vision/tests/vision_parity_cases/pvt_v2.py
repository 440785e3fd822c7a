"""PVTv2: spatial reduction on wide grids, linear attention (even and uneven 7x7 pool bins)."""

PVT_V2 = dict(
    image_size=[32, 48],
    hidden_sizes=[8, 16, 24, 32],
    num_attention_heads=[1, 2, 3, 4],
    depths=[1, 1, 1, 1],
    sr_ratios=[2, 2, 1, 1],
    mlp_ratios=[2, 2, 2, 2],
    num_labels=3,
)

CASES = {
    "pvt_v2": ("pvt_v2", PVT_V2),
    # A 28x56 image: stage 0's 7x14 grid pools in even bins, stage 1's 4x7 in uneven ones.
    "pvt_v2-linear-attention-3-stages-no-qkv-bias-gelu-new": (
        "pvt_v2",
        dict(
            PVT_V2,
            image_size=[28, 56],
            num_encoder_blocks=3,
            hidden_sizes=[8, 16, 24],
            num_attention_heads=[2, 2, 3],
            depths=[1, 2, 1],
            sr_ratios=[4, 2, 1],
            patch_sizes=[7, 3, 5],
            strides=[4, 2, 2],
            mlp_ratios=[3, 2, 1],
            linear_attention=True,
            qkv_bias=False,
            hidden_act="gelu_new",
            layer_norm_eps=1e-5,
            num_channels=4,
        ),
    ),
}
