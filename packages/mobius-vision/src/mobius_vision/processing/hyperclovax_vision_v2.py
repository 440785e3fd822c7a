"""HyperCLOVA X SEED Vision V2 images: Qwen2-VL's patches, one placeholder per merge block,
and plain 1-D positions.

``HyperCLOVAXVisionV2Processor`` runs ``Qwen2VLImageProcessor`` (the flattened patches and
``image_grid_thw`` of :class:`~.qwen_vl.QwenVLProcessor`) and expands ``<|image_pad|>`` the
same way, but returns no ``mm_token_type_ids`` and its model counts positions plainly
(no M-RoPE).
"""

from __future__ import annotations

import numpy as np

from mobius_vision.processing.qwen_vl import QwenVLProcessor


class HyperCLOVAXVisionV2Processor(QwenVLProcessor):
    """Qwen-VL's image path without the token types and 3-D positions."""

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        inputs = super().__call__(text, images)
        del inputs["mm_token_type_ids"]
        return inputs

    def rope_positions(self, inputs: dict[str, np.ndarray]):
        """None: the decoder's positions count tokens."""
        return None
