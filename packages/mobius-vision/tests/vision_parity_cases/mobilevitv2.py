"""MobileViTV2: maps that divide the patch size and ones whose last rows and columns the
patches drop (and folding leaves zero), a non-square image, dilation (output_stride 8 and 16),
patch size 3, a 5x5 depthwise conv, relu, a wider width multiplier, a larger FFN.

Conv and BatchNorm weights are drawn from ``N(0, initializer_range)``: at 0.3 and below the
features barely depend on the pixels (the two images give outputs within 1e-4); a little
above 0.4 they grow so that PyTorch's own fp32 result drifts 5e-5 from its fp64 one.
"""

MOBILEVITV2 = dict(
    width_multiplier=0.25,
    n_attn_blocks=[1, 2, 1],
    base_attn_unit_dims=[64, 96, 128],
    image_size=64,
    num_labels=3,
    initializer_range=0.4,
)

CASES = {
    "mobilevitv2": ("mobilevitv2", MOBILEVITV2),
    "mobilevitv2-dropped-edges-non-square-output-stride-8-patch-3-relu": (
        "mobilevitv2",
        dict(
            MOBILEVITV2,
            image_size=[80, 56],
            output_stride=8,
            patch_size=3,
            conv_kernel_size=5,
            hidden_act="relu",
            num_channels=4,
            initializer_range=0.35,  # relu is unbounded: at 0.4 the map grows to 1e1
        ),
    ),
    "mobilevitv2-dropped-edges-output-stride-16-width-0.5": (
        "mobilevitv2",
        dict(
            MOBILEVITV2,
            image_size=[72, 40],
            output_stride=16,
            width_multiplier=0.5,
            ffn_multiplier=3,
            expand_ratio=3.0,
            layer_norm_eps=1e-6,
            initializer_range=0.35,  # wider and deeper in channels: 0.4 grows the map to 1e1
        ),
    ),
}
