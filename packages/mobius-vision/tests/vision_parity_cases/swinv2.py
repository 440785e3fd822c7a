"""Swin V2: shifted cosine windows, windows clamped to small stages, pretrained window
sizes, padding to the window and to the patch, odd-sided merges (Swin's case sizes)."""

from vision_parity_cases.swin import SWIN

CASES = {
    "swinv2": ("swinv2", SWIN),
    # 27x35 pixels: a 7x9 grid (6 rows as transformers sizes windows), 4-windows padded to
    # 8x12; then 4x5 patches whose window is clamped to 3 (no shift), padded to 6x6
    "swinv2-clamped-window-pretrained-no-qkv-bias-relu": (
        "swinv2",
        dict(
            SWIN,
            depths=[2, 2],
            num_heads=[1, 2],
            window_size=4,
            image_size=[27, 35],
            patch_size=4,
            pretrained_window_sizes=[3, 2],
            qkv_bias=False,
            hidden_act="relu",
            mlp_ratio=2.5,
            layer_norm_eps=1e-6,
            num_channels=4,
        ),
    ),
    # 16x4 patches: 8-windows shifted by 4, the width padded from 4 to 8
    "swinv2-tall": (
        "swinv2",
        dict(SWIN, depths=[2], num_heads=[2], window_size=8, image_size=[32, 8]),
    ),
}
