"""ViT: class token, learned positions, pre-norm layers; the bare model's pooler."""

VIT = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    image_size=32,
    patch_size=8,
    num_labels=3,
)

CASES = {
    "vit": ("vit", VIT),
    "vit-no-qkv-bias-relu-wide": (
        "vit",
        dict(
            VIT,
            qkv_bias=False,
            hidden_act="relu",
            image_size=[24, 40],
            num_channels=4,
            pooler_output_size=20,
        ),
    ),
}
