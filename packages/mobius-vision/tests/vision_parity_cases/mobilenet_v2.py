"""MobileNetV2: TF SAME and symmetric padding, odd image sizes, dilation (output_stride), the stem's
extra expansion, a depth multiplier over 1 and the non-finegrained output width.

MobileNetV2 initialises weights from ``N(0, initializer_range)``; at the default 0.02 the outputs
do not depend on the pixels at all (both images give the same features), so the cases
draw weights at 0.25, where they do.
"""

MOBILENET_V2 = dict(depth_multiplier=0.25, initializer_range=0.25, image_size=32, num_labels=3)

CASES = {
    "mobilenet_v2": ("mobilenet_v2", MOBILENET_V2),
    "mobilenet_v2-odd-size-output-stride-8-stem-expansion": (
        "mobilenet_v2",
        dict(
            MOBILENET_V2,
            image_size=[35, 29],
            output_stride=8,
            first_layer_is_expansion=False,
            expand_ratio=2.0,
            num_channels=4,
            initializer_range=0.3,  # at 0.25 the pooled features of the two images differ by 4e-4
        ),
    ),
    "mobilenet_v2-no-tf-padding-not-finegrained-relu": (
        "mobilenet_v2",
        dict(
            MOBILENET_V2,
            tf_padding=False,
            finegrained_output=False,
            hidden_act="relu",
            initializer_range=0.2,  # relu is unbounded: 0.25 grows the features to 1e6
            layer_norm_eps=1e-5,
            image_size=[33, 40],
            output_stride=16,
        ),
    ),
}
