"""ResNet: basic and bottleneck layers, where the first stage and the bottleneck downsample."""

RESNET = dict(
    embedding_size=8,
    hidden_sizes=[8, 16, 24],
    depths=[1, 2, 1],
    layer_type="basic",
    image_size=32,
    num_labels=3,
)

CASES = {
    "resnet-basic": ("resnet", RESNET),
    "resnet-basic-first-stage-downsample-gelu": (
        "resnet",
        dict(RESNET, downsample_in_first_stage=True, hidden_act="gelu", image_size=[24, 40]),
    ),
    "resnet-bottleneck": (
        "resnet",
        dict(RESNET, layer_type="bottleneck", hidden_sizes=[16, 32, 48], num_channels=4),
    ),
    "resnet-bottleneck-downsample-in-bottleneck": (
        "resnet",
        dict(
            RESNET,
            layer_type="bottleneck",
            hidden_sizes=[16, 32, 48],
            embedding_size=16,
            downsample_in_bottleneck=True,
            downsample_in_first_stage=True,
            image_size=[36, 28],
        ),
    ),
}
