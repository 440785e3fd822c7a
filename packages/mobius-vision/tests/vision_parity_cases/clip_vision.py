"""CLIP's vision tower: the bare tower, the projection variant, a non-square image, gelu."""

CLIP_VISION = dict(
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    image_size=16,
    patch_size=4,
    projection_dim=8,
)

CASES = {
    "clip_vision_model": ("clip_vision_model", CLIP_VISION, dict(heads=("none",))),
    "clip_vision_model-with-projection": (
        "clip_vision_model",
        CLIP_VISION,
        dict(heads=("none",), model_class="CLIPVisionModelWithProjection"),
    ),
    "clip_vision_model-gelu-eps-3-channels-wide": (
        "clip_vision_model",
        dict(CLIP_VISION, hidden_act="gelu", layer_norm_eps=1e-6, num_hidden_layers=3),
        dict(heads=("none",)),
    ),
}
