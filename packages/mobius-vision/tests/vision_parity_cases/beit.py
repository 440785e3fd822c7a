"""BEiT: relative position biases (per layer, shared), layer scale, absolute positions, pooling."""

BEIT = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    image_size=32,
    patch_size=8,
    num_labels=3,
)

CASES = {
    "beit": ("beit", BEIT),
    "beit-relative-bias-absolute-positions": (
        "beit",
        dict(BEIT, use_relative_position_bias=True, use_absolute_position_embeddings=True),
    ),
    "beit-shared-bias-no-layer-scale-cls-pooling": (
        "beit",
        dict(
            BEIT,
            use_shared_relative_position_bias=True,
            layer_scale_init_value=0.0,
            use_mean_pooling=False,
            hidden_act="gelu_new",
        ),
    ),
    "beit-no-positions-wide": ("beit", dict(BEIT, image_size=[24, 40], num_channels=4)),
}
