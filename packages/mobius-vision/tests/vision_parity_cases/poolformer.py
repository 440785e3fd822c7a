"""PoolFormer: layer scale on and off, pool sizes, fractional MLP ratios, wide images.

PoolFormerConfig has no ``image_size``: the cases set one (the build reads it, 224 otherwise).
"""

POOLFORMER = dict(
    image_size=64,
    hidden_sizes=[8, 16, 24, 32],
    depths=[1, 1, 2, 1],
    num_labels=3,
)

CASES = {
    "poolformer": ("poolformer", POOLFORMER),
    "poolformer-no-layer-scale-pool5-relu-3-stages-wide": (
        "poolformer",
        dict(
            POOLFORMER,
            image_size=[40, 56],
            num_encoder_blocks=3,
            hidden_sizes=[8, 12, 16],
            depths=[2, 1, 1],
            patch_sizes=[5, 3, 2],
            strides=[3, 2, 2],
            padding=[1, 1, 0],
            pool_size=5,
            mlp_ratio=1.5,
            use_layer_scale=False,
            hidden_act="relu",
            num_channels=4,
        ),
    ),
}
