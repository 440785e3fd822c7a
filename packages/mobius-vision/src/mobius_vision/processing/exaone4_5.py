"""EXAONE 4.5's images: Qwen2-VL's patches and placeholders, with plain positions.

``Exaone4_5_Processor`` is ``Qwen2VLProcessor`` without the token types (its model
counts positions 1-D, so it needs no M-RoPE index).
"""

from __future__ import annotations

import numpy as np

from mobius_vision.processing.qwen_vl import QwenVLProcessor


class Exaone4_5Processor(QwenVLProcessor):
    """Exaone4_5_Processor over images: no ``mm_token_type_ids``, no rope positions."""

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        inputs = super().__call__(text, images)
        del inputs["mm_token_type_ids"]
        return inputs

    def rope_positions(self, inputs: dict[str, np.ndarray]):
        return None
