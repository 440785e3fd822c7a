"""Granite 4 Vision's images: LLaVA-NeXT's AnyRes tiles, their token counts downsampled.

``Granite4VisionProcessor`` tiles and normalises each image as ``LlavaNextProcessor`` does;
the ``<image>`` placeholder becomes the tokens of the downsampled feature grids: a tile's
``patches`` per side become ``int(patches * downsample_rate)`` before the unpadding and the
newlines are counted.
"""

from __future__ import annotations

from fractions import Fraction

from mobius.errors import MobiusError
from mobius_vision.processing.llava_next import (
    LlavaNextProcessor,
    select_best_resolution,
    unpadded_grid,
)


class Granite4VisionProcessor(LlavaNextProcessor):
    """Granite4VisionProcessor: LLaVA-NeXT's tiles, ``downsample_rate`` fewer tokens a side."""

    @property
    def downsample_rate(self) -> Fraction:
        value = self.processor_setting("downsample_rate", self.config_value("downsample_rate"))
        try:
            rate = Fraction(str(value))
        except (ValueError, ZeroDivisionError):
            raise MobiusError(f"downsample_rate {value!r} is not a fraction like '1/2'") from None
        if not 0 < rate <= 1:
            raise MobiusError(f"downsample_rate {value!r} is not in (0, 1]")
        return rate

    def image_tokens_for(self, size: tuple[int, int], tile: tuple[int, int]) -> int:
        """Tokens of an image of ``size`` whose tiles are ``tile`` pixels after processing."""
        best = select_best_resolution(size, self.pinpoints)
        scale = (best[0] // tile[0], best[1] // tile[1])
        rate = self.downsample_rate
        patches = tuple(int(t // self.patch_size * rate) for t in tile)
        rows, cols = unpadded_grid(size, patches, scale)
        count = rows * cols + rows + patches[0] * patches[1] + self.additional_tokens
        return count - 1 if self.strategy == "default" else count
