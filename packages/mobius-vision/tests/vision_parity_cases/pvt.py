"""PVT: sequence reduction on and off, three or four stages, qkv bias, activations, MLP ratios."""

PVT = dict(
    image_size=32,
    hidden_sizes=[8, 16, 24, 32],
    num_attention_heads=[1, 2, 3, 4],
    depths=[1, 1, 1, 1],
    sequence_reduction_ratios=[2, 2, 1, 1],
    mlp_ratios=[2, 2, 2, 2],
    num_labels=3,
)

CASES = {
    "pvt": ("pvt", PVT),
    "pvt-3-stages-no-qkv-bias-relu-sr4": (
        "pvt",
        dict(
            PVT,
            image_size=48,
            num_encoder_blocks=3,
            hidden_sizes=[8, 16, 24],
            num_attention_heads=[2, 2, 3],
            depths=[2, 1, 2],
            sequence_reduction_ratios=[4, 2, 1],
            patch_sizes=[4, 2, 2],
            strides=[4, 2, 2],
            mlp_ratios=[1, 3, 2],
            qkv_bias=False,
            hidden_act="relu",
            layer_norm_eps=1e-5,
            num_channels=4,
        ),
    ),
}
