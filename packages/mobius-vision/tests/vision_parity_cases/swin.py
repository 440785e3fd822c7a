"""Swin: shifted windows, padding to the window (and to the patch), odd-sided merges,
absolute position embeddings, qkv bias and activation variants."""

SWIN = dict(
    embed_dim=16,
    depths=[2, 1, 2],
    num_heads=[2, 2, 4],
    window_size=2,
    image_size=32,
    patch_size=2,
    num_labels=3,
)

CASES = {
    "swin": ("swin", SWIN),
    # a 12x10 grid, 4-windows: the width padded to 12, then a 6x5 stage padded to 8x8
    "swin-window-pad-absolute-no-qkv-bias-relu": (
        "swin",
        dict(
            SWIN,
            depths=[2, 2],
            num_heads=[1, 2],
            window_size=4,
            image_size=[24, 20],
            use_absolute_embeddings=True,
            qkv_bias=False,
            hidden_act="relu",
            mlp_ratio=2.5,
            layer_norm_eps=1e-6,
            num_channels=4,
        ),
    ),
    # a 27x35 image padded to 28x36 patches of 4 (a 7x9 grid), merged from odd sides to 4x5
    "swin-patch-pad-odd-merge": (
        "swin",
        dict(
            SWIN, depths=[2, 2], num_heads=[2, 2], window_size=3, image_size=[27, 35], patch_size=4
        ),
    ),
}
