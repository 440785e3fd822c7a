"""MobileViT: maps that divide the patch size and ones that are resized (bilinear) around the
transformer, a non-square image, dilation (output_stride 16 and 8), patch size 3, a 5x5 local
conv, gelu, no q/k/v bias.

Conv and BatchNorm weights are drawn from ``N(0, initializer_range)``: at 0.3 and below the
features do not depend on the pixels (both images give the same outputs), at 0.5 they grow
so that PyTorch's own fp32 result is 1.5e-4 from its fp64 one; the cases sit between.
"""

MOBILEVIT = dict(
    hidden_sizes=[16, 24, 32],
    neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 48],
    num_attention_heads=2,
    expand_ratio=2.0,
    image_size=64,
    num_labels=3,
    initializer_range=0.4,
)

CASES = {
    "mobilevit": ("mobilevit", MOBILEVIT),
    "mobilevit-resized-maps-non-square-output-stride-16": (
        "mobilevit",
        dict(
            MOBILEVIT,
            image_size=[80, 48],
            output_stride=16,
            num_channels=4,
            initializer_range=0.44,  # at 0.4 the two images' logits differ by 1e-4
        ),
    ),
    "mobilevit-output-stride-8-patch-3-kernel-5-gelu-no-qkv-bias": (
        "mobilevit",
        dict(
            MOBILEVIT,
            image_size=40,
            output_stride=8,
            patch_size=3,
            conv_kernel_size=5,
            hidden_act="gelu",
            qkv_bias=False,
            mlp_ratio=3.0,
            layer_norm_eps=1e-6,
            initializer_range=0.42,  # at 0.4 the two images' pooled features differ by 1.5e-3
        ),
    ),
}
