"""BLIP's vision tower (BLIP-2's, its qkv always biased), bare; and InstructBLIP-Video's,
InstructBLIP's own under another model_type."""

from .blip_2_vision import BLIP_2_VISION

CASES = {
    "blip_vision_model": (
        "blip_vision_model",
        BLIP_2_VISION,
        dict(heads=("none",), model_class="BlipVisionModel"),
    ),
    "instructblipvideo_vision_model": (
        "instructblipvideo_vision_model",
        BLIP_2_VISION,
        dict(heads=("none",), model_class="InstructBlipVideoVisionModel"),
    ),
}
