"""Aria's images: each resized to one padded square crop, its real pixels marked.

``AriaProcessor`` calls its image processor with its own defaults (no splitting), so an
image is resized until its long side is the crop size (the short side scaled alike,
truncated, but not under ``min_image_size``), zero-padded at the bottom and right,
rescaled and normalised; ``pixel_mask`` is true on the resized image's pixels. The crop
size here is the tower's ``image_size``, the one size the built graph takes (transformers'
processor crops to 980 pixels, the hub towers' size). The prompt's ``<|img|>`` becomes the
projector's queries per crop (``projector_patch_to_query_dict`` at the tower's patch
count, what the processor's ``size_conversion`` holds).
"""

from __future__ import annotations

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import BICUBIC, image_size, integer, pad, resize

#: AriaImageProcessor's defaults
ARIA_DEFAULTS = dict(resample=BICUBIC, image_mean=(0.5,) * 3, image_std=(0.5,) * 3)


class AriaProcessor(ImageTextProcessor):
    """AriaProcessor: ``pixel_values [images, 3, S, S]``, ``pixel_mask`` int64 ``[images, S, S]``."""

    image_defaults = ARIA_DEFAULTS

    def __init__(self, tokenizer, image, settings) -> None:
        super().__init__(tokenizer, image, settings)
        self.image_token = self.token_text("image_token", "<|img|>")

    @property
    def crop_size(self) -> int:
        """The tower's square ``image_size``."""
        size = self.config_value("image_size", 980, section="vision_config")
        if not isinstance(size, int) or isinstance(size, bool) or not 0 < size < 1 << 14:
            raise MobiusError(f"vision_config.image_size must be a positive int, got {size!r}")
        return size

    @property
    def tokens_per_crop(self) -> int:
        """The projector's queries for the tower's patch count."""
        patch = self.config_value("patch_size", 14, section="vision_config")
        if not isinstance(patch, int) or isinstance(patch, bool) or not 0 < patch <= self.crop_size:
            raise MobiusError(f"vision_config.patch_size must be a positive int, got {patch!r}")
        table = self.config_value("projector_patch_to_query_dict", {})
        patches = str((self.crop_size // patch) ** 2)
        queries = table.get(patches) if isinstance(table, dict) else None
        if not isinstance(queries, int) or isinstance(queries, bool) or queries < 1:
            raise MobiusError(
                f"projector_patch_to_query_dict has no query count for {patches} patches"
            )
        return queries

    def fitted_size(self, size: tuple[int, int]) -> tuple[int, int]:
        """The resized ``(height, width)``: the long side the crop's, the short side scaled."""
        height, width = size
        crop = self.crop_size
        shortest = integer(self.image.raw, "min_image_size", 336, 1, crop)
        scale = crop / max(height, width)
        if width >= height:
            return max(int(height * scale), shortest), crop
        return crop, max(int(width * scale), shortest)

    def process(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One image's ``[3, S, S]`` float32 pixels and ``[S, S]`` bool mask."""
        crop = self.crop_size
        fitted = resize(image, self.fitted_size(image_size(image)), self.image.resample)
        height, width = image_size(fitted)
        mask = np.zeros((crop, crop), dtype=bool)
        mask[:height, :width] = True
        return self.image.finish(pad(fitted, (crop, crop))), mask

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        self.count_placeholders(text, images)
        processed = [self.process(image) for image in self.arrays(images)]
        text = self.expand(text, [self.image_token * self.tokens_per_crop] * len(processed))
        inputs = self.tokenize(text)
        if processed:
            inputs["pixel_values"] = np.stack([pixels for pixels, _ in processed])
            inputs["pixel_mask"] = np.stack([mask for _, mask in processed]).astype(np.int64)
        return inputs
