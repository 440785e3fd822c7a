"""MaskFormer's Swin encoder (``MaskFormerSwinModel``): always-full windows. A 20x28 patch grid,
window 4: the second stage (10x14) padded to 12x16, the third (5x7, merged from odd sides) to
8x8, each odd block still shifted. transformers ships no classifier for it."""

CASES = {
    "maskformer-swin": (
        "maskformer-swin",
        dict(
            embed_dim=16,
            depths=[2, 2, 2],
            num_heads=[2, 2, 4],
            window_size=4,
            image_size=[40, 56],
            patch_size=2,
            mlp_ratio=2.0,
        ),
        dict(heads=("none",)),
    ),
}
