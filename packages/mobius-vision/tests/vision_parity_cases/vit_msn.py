"""ViT-MSN: ViT with no pooler; the classifier checkpoint's unprefixed encoder keys."""

from vision_parity_cases.vit import VIT

CASES = {
    "vit_msn": ("vit_msn", VIT),
    "vit_msn-no-qkv-bias-gelu-new-wide": (
        "vit_msn",
        dict(VIT, qkv_bias=False, hidden_act="gelu_new", image_size=[24, 40], num_channels=4),
    ),
}
