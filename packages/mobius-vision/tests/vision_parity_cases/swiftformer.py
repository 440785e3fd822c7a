"""SwiftFormer: downsampling by flag, by width or not at all; layer scale on and off; odd sizes.

SwiftFormer initialises every conv and linear with std 0.02 whatever ``initializer_range``
says; the widths are the smallest whose logits still depend on the image.
"""

SWIFTFORMER = dict(
    image_size=32,
    depths=[2, 1, 2],
    embed_dims=[8, 16, 32],
    downsamples=[False, True, True],  # stage 0 -> 1 downsamples because the width changes
    num_labels=3,
)

CASES = {
    "swiftformer": ("swiftformer", SWIFTFORMER),
    "swiftformer-no-layer-scale-odd-size-patch": (
        "swiftformer",
        dict(
            SWIFTFORMER,
            image_size=[30, 37],
            num_channels=4,
            depths=[1, 3, 1],
            embed_dims=[16, 16, 24],
            downsamples=[False, True, True],  # stage 0 -> 1 keeps size and width: none
            use_layer_scale=False,
            down_patch_size=2,
            down_pad=0,
            hidden_act="relu",
            mlp_ratio=2,
            batch_norm_eps=1e-3,
        ),
    ),
}
