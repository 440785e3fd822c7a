"""Idefics2 images: each resized within ``[shortest_edge, longest_edge]``, optionally split in
four plus the whole, and ``image_seq_len`` tokens per frame between fake tokens.

What ``Idefics2ImageProcessor`` (its PIL backend) and ``Idefics2Processor`` do, without
torch. With ``do_image_splitting`` an image is cut into its four quarters first (the
odd pixel going to the right and bottom ones) and followed by itself; every frame is
then resized so its longer side is at most ``longest_edge`` (the other scaled, rounded
down) and neither under ``shortest_edge``, rescaled, normalised, and zero-padded to the
largest frame with ``pixel_attention_mask`` (:class:`.idefics3.Idefics3Processor`'s
padding). The prompt's ``<image>`` becomes
``<fake_token_around_image>`` + ``<image>`` * ``image_seq_len`` + ``<fake_token_around_image>``
per frame; two fake tokens in a row fold into one, and a space follows a closing fake
token that text follows directly.
"""

from __future__ import annotations

import re

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._image import BILINEAR, flag, integer, resize
from mobius_vision.processing.idefics3 import Idefics3Processor

#: Idefics2ImageProcessor's defaults.
IDEFICS2_DEFAULTS = dict(
    size={"shortest_edge": 378, "longest_edge": 980},
    resample=BILINEAR,
    image_mean=(0.5, 0.5, 0.5),
    image_std=(0.5, 0.5, 0.5),
)


def bounded_size(height: int, width: int, shortest: int, longest: int) -> tuple[int, int]:
    """``(height, width)`` with the longer side at most ``longest`` (the other scaled and
    rounded down), then each side at least ``shortest``."""
    ratio = width / height
    if width >= height and width > longest:
        width, height = longest, int(longest / ratio)
    elif height > width and height > longest:
        height, width = longest, int(longest * ratio)
    return max(height, shortest), max(width, shortest)


def quarters(image: np.ndarray) -> list[np.ndarray]:
    """The four quarters of ``[c, h, w]`` (row by row), then the whole image."""
    height, width = image.shape[-2:]
    top, left = height // 2, width // 2
    return [
        image[:, :top, :left],
        image[:, :top, left:],
        image[:, top:, :left],
        image[:, top:, left:],
        image,
    ]


class Idefics2Processor(Idefics3Processor):
    """Idefics2Processor over images (module docstring)."""

    image_defaults = IDEFICS2_DEFAULTS

    @property
    def image_seq_len(self) -> int:
        """Image tokens per frame: the processor's setting, else the perceiver's latents."""
        perceiver = self.settings.config.get("perceiver_config")
        default = 64
        if isinstance(perceiver, dict):
            default = integer(perceiver, "resampler_n_latents", 64, 1, 1 << 16)
        return integer(self.settings.processor, "image_seq_len", default, 1, 1 << 16)

    @property
    def splits(self) -> bool:
        return flag(self.image.raw, "do_image_splitting", False)

    def frames(self, image: np.ndarray) -> tuple[list[np.ndarray], int, int]:
        pieces = quarters(image) if self.splits else [image]
        settings = self.image
        if settings.do_resize:
            size = settings.size
            if "shortest_edge" in size and "longest_edge" in size:
                bounds = size["shortest_edge"], size["longest_edge"]
                pieces = [
                    resize(p, bounded_size(*p.shape[-2:], *bounds), settings.resample)
                    for p in pieces
                ]
            elif "height" in size and "width" in size:
                target = size["height"], size["width"]
                pieces = [resize(p, target, settings.resample) for p in pieces]
            else:
                raise MobiusError(f"unsupported resize setting {size}")
        return pieces, 0, 0

    def image_text(self, rows: int, columns: int) -> str:
        fake = self.fake_image_token
        one = f"{fake}{self.image_token * self.image_seq_len}{fake}"
        return one * 5 if self.splits else one

    def expand(self, text: str, expansions: list[str]) -> str:
        fake = self.fake_image_token
        text = super().expand(text, expansions).replace(fake + fake, fake)
        return re.sub(rf"{re.escape(fake)}(?=[^\s<])", f"{fake} ", text)
