"""Idefics3's (and SmolVLM's) vision tower: the bare tower (transformers' AutoModel), odd sizes,
patch grids whose bucketized positions are not ``0..N-1`` (19 and 25 patches a side), gelu.

No ForImageClassification class takes these configs: only the tower is compared. Its sizes
are SigLIP's case's (the same layers).
"""

from vision_parity_cases.siglip_vision import SIGLIP_VISION

CASES = {
    "idefics3_vision": ("idefics3_vision", SIGLIP_VISION, dict(heads=("none",))),
    # 19 patches a side: transformers' buckets repeat 11 and skip 12 (float rounding).
    "idefics3_vision-19-patches-gelu-3-layers": (
        "idefics3_vision",
        dict(
            SIGLIP_VISION,
            image_size=38,
            patch_size=2,
            hidden_act="gelu",
            layer_norm_eps=1e-5,
            num_hidden_layers=3,
        ),
        dict(heads=("none",)),
    ),
    # 18 // 4: the conv drops the last two pixel rows and columns; 4 input channels.
    "idefics3_vision-odd-image-channels": (
        "idefics3_vision",
        dict(SIGLIP_VISION, image_size=18, num_channels=4, num_attention_heads=2),
        dict(heads=("none",)),
    ),
    # 25 patches a side: several repeated buckets.
    "smolvlm_vision-25-patches": (
        "smolvlm_vision",
        dict(SIGLIP_VISION, image_size=75, patch_size=3),
        dict(heads=("none",)),
    ),
    "smolvlm_vision": ("smolvlm_vision", SIGLIP_VISION, dict(heads=("none",))),
}
