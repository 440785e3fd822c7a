"""Mistral 3's (Pixtral's) images: any size in patch multiples, rows of ``[IMG]`` tokens.

What ``PixtralImageProcessor`` (its PIL backend) and ``PixtralProcessor`` do, without
torch. Each image shrinks to fit ``size["longest_edge"]`` (never grows; the ratio kept,
sides floored), then rounds up to multiples of ``patch_size * spatial_merge_size``; it is
rescaled, normalised and zero-padded at the bottom and right to the prompt's largest
image: ``pixel_values`` ``[images, 3, height, width]`` and ``image_sizes`` ``[images, 2]``
(each image's own size). The prompt's ``[IMG]`` becomes a row of ``[IMG]`` per merged
patch row, each row ended by ``[IMG_BREAK]``, the last by ``[IMG_END]``.
"""

from __future__ import annotations

import math

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import BICUBIC, flag, integer, pad, resize

#: PixtralImageProcessor's defaults.
PIXTRAL_DEFAULTS = dict(
    size={"longest_edge": 1024},
    resample=BICUBIC,
    image_mean=(0.48145466, 0.4578275, 0.40821073),
    image_std=(0.26862954, 0.26130258, 0.27577711),
)


def fit_size(height: int, width: int, longest: tuple[int, int], block: int) -> tuple[int, int]:
    """``(height, width)`` shrunk (floored) to fit ``longest`` ``(height, width)``, then
    rounded up to multiples of ``block``."""
    ratio = max(height / longest[0], width / longest[1])
    if ratio > 1:
        height, width = int(math.floor(height / ratio)), int(math.floor(width / ratio))
    return (height - 1) // block * block + block, (width - 1) // block * block + block


class PixtralProcessor(ImageTextProcessor):
    """PixtralProcessor (mistral3): images at their own size, a token per merged patch."""

    image_defaults = PIXTRAL_DEFAULTS

    def _token(self, name: str, default: str) -> str:
        value = self.processor_setting(name, default)
        return value if isinstance(value, str) and value else default

    @property
    def image_token(self) -> str:
        return self._token("image_token", "[IMG]")

    @property
    def block(self) -> int:
        """Pixels a side of one image token: the tower's patch times the merge size (the
        processor's settings, else the config's)."""
        patch = self.config_value("patch_size", 16, section="vision_config")
        merge = self.config_value("spatial_merge_size", 1)
        patch = integer(self.settings.processor, "patch_size", patch, 1, 1 << 12)
        merge = integer(self.settings.processor, "spatial_merge_size", merge, 1, 64)
        return patch * merge

    @property
    def resize_block(self) -> int:
        """Pixels the resized sides are multiples of: :attr:`block` (the processor hands its
        image processor the merged patch)."""
        return self.block

    def resized(self, image: np.ndarray) -> np.ndarray:
        """One ``[3, h, w]`` uint8 image at the size the processor gives it."""
        if not self.image.do_resize:
            return image
        size = self.image.size
        longest = size.get("longest_edge")
        bounds = (longest, longest) if longest else (size.get("height"), size.get("width"))
        if not all(bounds):
            raise MobiusError(f"preprocessor setting size needs longest_edge: {size}")
        target = fit_size(*image.shape[-2:], bounds, self.resize_block)
        return resize(image, target, self.image.resample)

    def image_text(self, height: int, width: int) -> str:
        """What one ``height x width`` image's placeholder becomes."""
        rows, columns = height // self.block, width // self.block
        row = self.image_token * columns
        row_break = self._token("image_break_token", "[IMG_BREAK]")
        return (row + row_break) * (rows - 1) + row + self._token("image_end_token", "[IMG_END]")

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        self.count_placeholders(text, images)
        pixels = [self.image.finish(self.resized(image)) for image in self.arrays(images)]
        sizes = [p.shape[-2:] for p in pixels]
        inputs = self.tokenize(self.expand(text, [self.image_text(*s) for s in sizes]))
        if pixels:
            if flag(self.image.raw, "do_pad", True):
                largest = (max(s[0] for s in sizes), max(s[1] for s in sizes))
                pixels = [pad(p, largest) for p in pixels]
            inputs["pixel_values"] = np.stack(pixels)
            inputs["image_sizes"] = np.asarray(sizes, dtype=np.int64)
        return inputs
