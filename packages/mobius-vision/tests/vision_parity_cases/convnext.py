"""ConvNeXt: patch sizes, layer scale on and off, the final LayerNorm's eps."""

CONVNEXT = dict(
    hidden_sizes=[8, 16, 24],
    depths=[1, 2, 1],
    num_stages=3,
    image_size=32,
    num_labels=3,
)

CASES = {
    "convnext": ("convnext", CONVNEXT),
    "convnext-no-layer-scale-patch2-relu-wide": (
        "convnext",
        dict(
            CONVNEXT,
            layer_scale_init_value=0.0,
            patch_size=2,
            hidden_act="relu",
            layer_norm_eps=1e-5,
            image_size=[16, 24],
            num_channels=4,
        ),
    ),
}
