"""Cohere2 Vision's images: tiles on the grid that needs the least upscaling (or, when every
grid shrinks the image, the least shrinking), plus a thumbnail; each tile's tokens end
with a line break, between ``<|START_OF_IMG|>`` and ``<|END_OF_IMG|>``.

transformers has this image processor on its torchvision backend only; here it runs on
the PIL operations of :mod:`._image`, as its GOT-OCR2 parent does.
"""

from __future__ import annotations

import numpy as np

from mobius_vision.processing._image import flag, integer
from mobius_vision.processing._tiles import GOT_OCR2_DEFAULTS, TiledProcessor, grids


def least_scaled_grid(size, tile: int, high: int) -> tuple[int, int]:
    """Cohere2's ``(columns, rows)`` (module docstring)."""
    height, width = size
    options = grids(1, high)
    scales = (np.array(options) * tile / np.array([width, height])).min(axis=-1)
    if np.all(scales < 1):
        return options[int(np.argmax(scales))]
    return options[int(np.argmin(np.where(scales < 1, 10e9, scales)))]


class Cohere2VisionProcessor(TiledProcessor):
    """Cohere2VisionProcessor: ``patch_size**2`` image tokens and a line break per tile."""

    image_defaults = dict(GOT_OCR2_DEFAULTS, size={"height": 512, "width": 512})

    def crops(self) -> bool:  # the image processor's setting decides (its default: on)
        return flag(self.image.raw, "crop_to_patches", True)

    @property
    def image_token(self) -> str:
        return self.token_text("image_token", "<|IMG_PATCH|>")

    def grid(self, size: tuple[int, int]) -> tuple[int, int]:
        return least_scaled_grid(size, self.tile_size[0], self.patch_range()[1])

    def expansion(self, tiles: int) -> str:
        side = integer(self.image.raw, "patch_size", 16, 1, 1 << 12)  # tokens per tile side
        line = self.token_text("img_line_break_token", "<|IMG_LINE_BREAK|>")
        tile = self.image_token * side**2 + line
        begin = self.token_text("boi_token", "<|START_OF_IMG|>")
        return begin + tile * tiles + self.token_text("eoi_token", "<|END_OF_IMG|>")
