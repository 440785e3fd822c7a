"""Llama 4's vision tower (transformers' ``Llama4VisionModel``, which no Auto class maps): the unfold patches,
the appended class token, 2-D interleaved rotary, the pixel shuffle and the adapter MLP.

``last_hidden_state`` is the adapter's output. The intermediate size is the pixel shuffle's
width (hidden over ratio squared), as the adapter's first linear needs.
"""

LLAMA4_VISION = dict(
    hidden_size=16,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    image_size=16,
    patch_size=4,
    vision_output_dim=24,
    projector_input_dim=24,
    projector_output_dim=24,
)

CASES = {
    "llama4_vision_model": (
        "llama4_vision_model",
        LLAMA4_VISION,
        dict(heads=("none",), model_class="Llama4VisionModel"),
    ),
    # 4-pixel patches over 24 pixels: a 6x6 grid folded to 3x3; head_dim 4 (one frequency
    # per axis), another theta, three layers
    "llama4_vision_model-6-patches-4-heads-theta": (
        "llama4_vision_model",
        dict(
            LLAMA4_VISION,
            image_size=24,
            num_attention_heads=4,
            num_hidden_layers=3,
            rope_parameters={"rope_type": "default", "rope_theta": 100.0},
        ),
        dict(heads=("none",), model_class="Llama4VisionModel"),
    ),
}
