"""RegNet: X and Y layers, grouped convolutions, with and without first-stage downsampling."""

REGNET = dict(
    embedding_size=8,
    hidden_sizes=[8, 16, 24],
    depths=[1, 2, 1],
    groups_width=4,
    layer_type="y",
    image_size=32,
    num_labels=3,
)

CASES = {
    "regnet-y": ("regnet", REGNET),
    "regnet-x-no-first-downsample-wide": (
        "regnet",
        dict(
            REGNET,
            layer_type="x",
            downsample_in_first_stage=False,
            image_size=[20, 36],
            num_channels=4,
        ),
    ),
    "regnet-y-gelu-groups8": (
        "regnet",
        dict(REGNET, groups_width=8, hidden_act="gelu", embedding_size=12),
    ),
}
