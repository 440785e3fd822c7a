"""YOLOS: detection tokens, bicubic position resizing (a larger and a smaller image than the
tables', non-square), with and without the per-layer mid positions."""

YOLOS = dict(
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=32,
    image_size=[32, 48],
    patch_size=8,
    num_detection_tokens=5,
    num_labels=3,
    initializer_range=0.2,  # transformers' 0.02 leaves boxes nearly the same for every image
)

CASES = {
    "yolos-mid-positions-larger-image": ("yolos", YOLOS, dict(image_size=(48, 72))),
    "yolos-no-mid-positions-smaller-image": (
        "yolos",
        dict(YOLOS, use_mid_position_embeddings=False, num_hidden_layers=3, hidden_act="gelu_new"),
        dict(image_size=(27, 40)),
    ),
}
