"""FocalNet: odd image sizes (padded patches), conv embeddings, post-layernorm, layer scale."""

FOCALNET = dict(
    embed_dim=8,
    depths=[1, 2],
    focal_levels=[2, 3],
    focal_windows=[3, 3],
    image_size=32,
    num_labels=3,
)

CASES = {
    "focalnet": ("focalnet", FOCALNET),
    "focalnet-odd-size-conv-embed-layerscale": (
        "focalnet",
        dict(
            FOCALNET,
            image_size=[30, 44],  # 8x11 tokens: the conv merging pads 11 to 12
            use_conv_embed=True,
            use_layerscale=True,
            layerscale_value=0.5,
            focal_windows=[1, 3],
            num_channels=4,
        ),
    ),
    "focalnet-post-layernorm-normalize-modulator-3-stages": (
        "focalnet",
        dict(
            FOCALNET,
            depths=[1, 1, 1],
            focal_levels=[1, 2, 1],
            focal_windows=[3, 5, 3],
            image_size=[34, 27],
            patch_size=2,
            use_post_layernorm=True,
            use_post_layernorm_in_modulation=True,
            normalize_modulator=True,
            hidden_act="gelu_new",
            mlp_ratio=2.0,
            layer_norm_eps=1e-6,
        ),
    ),
}
