"""TextNet: every branch combination (kxl, kx1, 1xl, identity), strides, an odd final map
(the 2x2 adaptive pool's bins overlap), the stem's activation."""

TEXTNET = dict(
    image_size=32,
    stem_out_channels=8,
    hidden_sizes=[8, 8, 16],
    conv_layer_kernel_sizes=[[[3, 3], [1, 3]], [[3, 3], [3, 1], [1, 1]]],
    conv_layer_strides=[[1, 1], [2, 1, 1]],
    num_labels=3,
)

CASES = {
    "textnet": ("textnet", TEXTNET),
    "textnet-odd-size-3-stages-gelu-stem": (
        "textnet",
        dict(
            TEXTNET,
            image_size=[38, 27],
            stem_kernel_size=5,
            stem_act_func="gelu",
            hidden_sizes=[8, 12, 12, 16],
            conv_layer_kernel_sizes=[[[3, 1]], [[1, 3], [3, 3]], [[3, 3], [5, 3]]],
            conv_layer_strides=[[2], [1, 1], [2, 1]],
            batch_norm_eps=1e-3,
        ),
    ),
}
