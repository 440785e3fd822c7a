"""Donut Swin: Swin with no final LayerNorm; shifted and padded windows, an odd merge."""

CASES = {
    "donut-swin": (
        "donut-swin",
        dict(
            embed_dim=16,
            depths=[2, 2],
            num_heads=[2, 4],
            window_size=3,
            # 13x10 patches padded to 15x12; merged (13 rows padded to 14) to 7x5, padded to 9x6
            image_size=[26, 20],
            patch_size=2,
            hidden_act="gelu_new",
            num_labels=3,
        ),
    ),
}
