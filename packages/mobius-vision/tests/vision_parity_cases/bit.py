"""BiT: pre-activation and plain bottlenecks, symmetric and TF SAME padding, the stem's
zero-padded (dynamic) max pool, odd and non-square images, dilation (output_stride 8, up to
the dilation-4 stage whose first 3x3 transformers dilates by 2 only)."""

BIT = dict(
    embedding_size=8,
    hidden_sizes=[16, 32, 48],
    depths=[1, 2, 1],
    num_groups=2,
    image_size=32,
    num_labels=3,
)

CASES = {
    "bit-preactivation": ("bit", BIT),
    "bit-preactivation-dynamic-pool-same-odd-size": (
        "bit",
        dict(
            BIT,
            embedding_dynamic_padding=True,
            global_padding="SAME",
            image_size=[35, 29],
            num_channels=4,
        ),
    ),
    "bit-bottleneck-same-gelu": (
        "bit",
        dict(BIT, layer_type="bottleneck", global_padding="same", hidden_act="gelu", num_groups=4),
    ),
    "bit-bottleneck-output-stride-8-dynamic-pool": (
        "bit",
        dict(
            BIT,
            layer_type="bottleneck",
            hidden_sizes=[16, 24, 32, 40],
            depths=[1, 1, 2, 2],
            output_stride=8,
            embedding_dynamic_padding=True,
            image_size=[30, 37],
        ),
    ),
}
