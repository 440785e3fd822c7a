"""Pixtral's vision tower: square and non-square images (a grid that drops pixel rows), silu, depth.

transformers' tower packs the batch into one sequence ``[1, patches, hidden]`` with a
block mask; without ``image_sizes`` each image fills its tensor.
"""

PIXTRAL = dict(
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    image_size=16,
    patch_size=4,
)

CASES = {
    "pixtral": ("pixtral", PIXTRAL, dict(heads=("none",))),
    # 18 x 22 over 4-pixel patches: a 4 x 5 grid, the last pixel rows and columns dropped
    "pixtral-odd-image-silu-3-layers-theta": (
        "pixtral",
        dict(
            PIXTRAL,
            image_size=[18, 22],
            hidden_act="silu",
            num_hidden_layers=3,
            num_attention_heads=2,
            rope_parameters={"rope_type": "axial", "rope_theta": 100.0},
        ),
        dict(heads=("none",)),
    ),
}
