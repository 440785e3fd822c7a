"""MobileNetV1: TF SAME padding on odd sizes, symmetric padding, depth multiplier and min depth.

MobileNetV1 initialises weights from ``N(0, initializer_range)``; at the default 0.02 the outputs
do not depend on the pixels at all (both images give the same features), so the cases
draw weights at 0.35, where they do.
"""

MOBILENET_V1 = dict(depth_multiplier=0.25, initializer_range=0.35, image_size=32, num_labels=3)

CASES = {
    "mobilenet_v1": ("mobilenet_v1", MOBILENET_V1),
    "mobilenet_v1-odd-size-min-depth": (
        "mobilenet_v1",
        dict(MOBILENET_V1, image_size=[37, 45], min_depth=16, num_channels=4),
    ),
    "mobilenet_v1-no-tf-padding-relu": (
        "mobilenet_v1",
        dict(
            MOBILENET_V1,
            tf_padding=False,
            hidden_act="relu",
            layer_norm_eps=1e-5,
            depth_multiplier=0.125,
            image_size=[33, 40],
        ),
    ),
}
