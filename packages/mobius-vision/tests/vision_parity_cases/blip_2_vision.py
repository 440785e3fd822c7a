"""BLIP-2's (and InstructBLIP's, the same) vision tower: the bare tower, without the qkv bias."""

BLIP_2_VISION = dict(
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    image_size=16,
    patch_size=4,
)

CASES = {
    "blip_2_vision_model": (
        "blip_2_vision_model",
        BLIP_2_VISION,
        dict(heads=("none",), model_class="Blip2VisionModel"),
    ),
    "blip_2_vision_model-no-qkv-bias-3-layers": (
        "blip_2_vision_model",
        dict(BLIP_2_VISION, qkv_bias=False, num_hidden_layers=3, layer_norm_eps=1e-5),
        dict(heads=("none",), model_class="Blip2VisionModel"),
    ),
    "instructblip_vision_model": (
        "instructblip_vision_model",
        BLIP_2_VISION,
        dict(heads=("none",), model_class="InstructBlipVisionModel"),
    ),
}
