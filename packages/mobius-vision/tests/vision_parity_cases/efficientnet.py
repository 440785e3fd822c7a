"""EfficientNet: width/depth scaling, odd image sizes (both depthwise paddings), mean and max pool.

EfficientNet initialises BatchNorm scales from ``N(0, initializer_range)``; at the default
0.02 the outputs do not depend on the pixels at all (both images give the same features),
so the cases draw weights at 0.6, where they do and a misplaced padding row fails.
"""

EFFICIENTNET = dict(
    width_coefficient=0.25,
    depth_coefficient=0.5,
    hidden_dim=320,
    initializer_range=0.6,
    image_size=32,
    num_labels=3,
)

CASES = {
    "efficientnet": ("efficientnet", EFFICIENTNET),
    "efficientnet-odd-size-depthwise-padding-max-pool": (
        "efficientnet",
        dict(
            EFFICIENTNET,
            image_size=[37, 30],
            depthwise_padding=[1, 3],
            pooling_type="max",
            initializer_range=0.55,  # 0.6 grows the logits to ~100; 0.5 moves them by under 1e-3
            hidden_act="relu",
            num_channels=4,
        ),
    ),
    "efficientnet-short-wide": (
        "efficientnet",
        dict(
            EFFICIENTNET,
            width_coefficient=0.5,
            depth_coefficient=1.0,
            hidden_dim=640,
            kernel_sizes=[3, 5, 3],
            in_channels=[32, 16, 24],
            out_channels=[16, 24, 40],
            strides=[2, 2, 1],
            num_block_repeats=[1, 2, 2],
            expand_ratios=[1, 4, 6],
            squeeze_expansion_ratio=0.5,
            batch_norm_eps=1e-5,
            image_size=[33, 26],
        ),
    ),
}
