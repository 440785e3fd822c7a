"""UperNet over ConvNeXt and Swin (stem and stage maps, uneven pooling bins), and those
backbones alone against transformers' ConvNextBackbone / SwinBackbone."""

CONVNEXT = dict(
    hidden_sizes=[8, 16, 24, 32],
    depths=[1, 1, 2, 1],
    num_stages=4,
    out_features=["stage1", "stage2", "stage3", "stage4"],
    initializer_range=0.5,
)
# Window 4 on a 64-pixel image: stage grids 16, 8, 4, 2; the last is smaller than the window
# (always partitioned: padded, still shifted in odd blocks).
SWIN = dict(
    image_size=64,
    embed_dim=8,
    depths=[2, 1, 2, 2],
    num_heads=[1, 2, 2, 4],
    window_size=4,
    out_features=["stage1", "stage2", "stage3", "stage4"],
    initializer_range=0.5,
)
UPERNET = dict(hidden_size=16, pool_scales=[1, 2, 3, 6], num_labels=4, use_auxiliary_head=False)

BACKBONE_CASES = {
    "convnext-backbone": ("convnext", dict(CONVNEXT, image_size=48)),
    "convnext-backbone-stem-no-layer-scale": (
        "convnext",
        dict(
            CONVNEXT,
            image_size=[40, 56],
            out_features=["stem", "stage2", "stage4"],
            layer_scale_init_value=0.0,
        ),
    ),
    "swin-backbone": ("swin", SWIN),
    "swin-backbone-stem-absolute-positions": (
        "swin",
        dict(SWIN, use_absolute_embeddings=True, out_features=["stem", "stage1", "stage3"]),
    ),
}

CASES = {
    "upernet-convnext": (
        "upernet",
        dict(UPERNET, backbone_config=dict(CONVNEXT, model_type="convnext")),
        dict(image_size=(64, 64)),
    ),
    # A wide image (last map 2x3: uneven 3- and 6-bin pooling), with the auxiliary head's
    # weights in the checkpoint, which the build leaves unread.
    "upernet-swin-auxiliary-head": (
        "upernet",
        dict(
            UPERNET,
            pool_scales=[1, 3, 6],
            use_auxiliary_head=True,
            auxiliary_channels=8,
            backbone_config=dict(SWIN, model_type="swin"),
        ),
        dict(image_size=(64, 96)),
    ),
}
