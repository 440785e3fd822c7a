"""LFM3-VL's images: the Qwen2-VL image processor's patches, on 1-D positions.

``Lfm3VlProcessor`` resizes and flattens each image exactly as Qwen2-VL's processor does
(multiples of ``patch_size * merge_size`` within the pixel bounds, patches in merge-block
order, ``image_grid_thw``) and writes ``<|image_pad|>`` once per merged block; it returns
no ``mm_token_type_ids``, and the decoder counts positions plainly (no M-RoPE).
"""

from __future__ import annotations

import numpy as np

from mobius_vision.processing.qwen_vl import QwenVLProcessor


class Lfm3VlProcessor(QwenVLProcessor):
    """Lfm3VlProcessor over images: Qwen-VL's patches without the token types."""

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        inputs = super().__call__(text, images)
        inputs.pop("mm_token_type_ids")
        return inputs

    def rope_positions(self, inputs: dict[str, np.ndarray]):
        """None: LFM3 rotates by the plain text position."""
        return None
