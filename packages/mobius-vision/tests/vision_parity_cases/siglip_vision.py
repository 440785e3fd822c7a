"""SigLIP's vision tower: the attention-pooling head or none, odd sizes, gelu and eps variants.

No ForImageClassification class takes these configs (SigLIP's classifier is the
``siglip`` type's): only the bare tower is compared.
"""

SIGLIP_VISION = dict(
    hidden_size=32,
    intermediate_size=37,
    num_hidden_layers=2,
    num_attention_heads=4,
    image_size=16,
    patch_size=4,
)

CASES = {
    "siglip_vision_model": ("siglip_vision_model", SIGLIP_VISION, dict(heads=("none",))),
    "siglip_vision_model-no-head-gelu-3-layers": (
        "siglip_vision_model",
        dict(
            SIGLIP_VISION,
            vision_use_head=False,
            hidden_act="gelu",
            layer_norm_eps=1e-5,
            num_hidden_layers=3,
        ),
        dict(heads=("none",)),
    ),
    # 18 // 4: the conv drops the last two pixel rows and columns; 4 input channels.
    "siglip_vision_model-odd-image-channels": (
        "siglip_vision_model",
        dict(SIGLIP_VISION, image_size=18, num_channels=4, num_attention_heads=2),
        dict(heads=("none",)),
    ),
}
