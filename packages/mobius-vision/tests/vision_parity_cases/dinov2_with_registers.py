"""DINOv2 with registers: register tokens after the class token, skipped by the classifier's mean."""

from vision_parity_cases.dinov2 import DINOV2

CASES = {
    "dinov2_with_registers": ("dinov2_with_registers", dict(DINOV2, num_register_tokens=3)),
    "dinov2_with_registers-swiglu-no-qkv-bias-one-register": (
        "dinov2_with_registers",
        dict(DINOV2, num_register_tokens=1, use_swiglu_ffn=True, qkv_bias=False, image_size=40),
    ),
}
