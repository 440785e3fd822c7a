"""CvT: a class token in the last stage (the classifier reads it) or none (backbone only), a
class token in a middle stage too, three stages, odd and non-square images, a 5x5 q/k/v
kernel, k/v stride 1, no q/k/v bias, other MLP ratios, one head or several.

transformers indexes each stage's drop-path rates by the stage number, so stage ``i`` needs
a depth over ``i``.
"""

CVT = dict(
    embed_dim=[8, 16],
    num_heads=[1, 2],
    depth=[1, 2],
    cls_token=[False, True],
    image_size=32,
    num_labels=3,
)

CASES = {
    "cvt": ("cvt", CVT),
    "cvt-no-cls-token-three-stages-odd-size": (
        "cvt",
        dict(
            CVT,
            embed_dim=[8, 16, 24],
            num_heads=[1, 2, 3],
            depth=[1, 2, 3],
            cls_token=[False, False, False],
            qkv_bias=[True, False, True],
            mlp_ratio=[4.0, 2.0, 3.0],
            kernel_qkv=[3, 5, 3],
            padding_q=[1, 2, 1],
            padding_kv=[1, 2, 1],
            stride_kv=[2, 2, 1],
            image_size=[37, 29],
            num_channels=4,
        ),
        # transformers' classifier fails with no class token in the last stage (so mobius refuses)
        dict(heads=("none",)),
    ),
    "cvt-cls-token-middle-and-last-stage": (
        "cvt",
        dict(
            CVT,
            embed_dim=[8, 16, 16],
            num_heads=[2, 2, 4],
            depth=[1, 2, 3],
            cls_token=[False, True, True],
            patch_sizes=[5, 3, 3],
            patch_stride=[2, 2, 1],
            patch_padding=[1, 1, 1],
            image_size=[24, 32],
        ),
    ),
}
