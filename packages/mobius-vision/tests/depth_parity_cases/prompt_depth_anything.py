"""Prompt Depth Anything: Depth Anything plus a low-resolution prompt depth, rescaling to metric."""

from depth_parity_cases.depth_anything import DEPTH_ANYTHING

CASES = {
    # A 6 x 5 prompt is resized to each fusion map (7 x 9 up to 56 x 72 here).
    "prompt_depth_anything": (
        "prompt_depth_anything",
        DEPTH_ANYTHING,
        dict(image_size=(28, 36), prompt_size=(6, 5)),
    ),
}
