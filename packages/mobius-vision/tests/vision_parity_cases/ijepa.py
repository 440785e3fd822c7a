"""I-JEPA: no class token, patch-only positions, the classifier on the mean of all tokens."""

from vision_parity_cases.vit import VIT

CASES = {
    "ijepa": ("ijepa", VIT),
    "ijepa-no-qkv-bias-relu-wide": (
        "ijepa",
        dict(VIT, qkv_bias=False, hidden_act="relu", image_size=[24, 40], num_channels=4),
    ),
}
