"""LLaVA-OneVision's images: LLaVA-NeXT's anyres tiles for an image alone in its prompt; with
several images in a prompt each is padded to a square (with the mean colour) and untiled.

A tiled image's tokens are LLaVA-NeXT's, with the grid's feature map shrunk to at most
``anyres_max_N`` tiles' worth; an untiled one has the tower's tokens plus a newline.
``batch_num_images`` (the images of the prompt) goes to the vision graph too.
"""

from __future__ import annotations

import math
import re

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._image import image_size, integer, pad_to_square
from mobius_vision.processing.llava import CLIP_DEFAULTS
from mobius_vision.processing.llava_next import (
    LlavaNextProcessor,
    pad_tiles,
    select_best_resolution,
    unpadded_grid,
)

#: LlavaOnevisionImageProcessor's defaults: square tiles of 384, no crop.
ONEVISION_DEFAULTS = dict(
    CLIP_DEFAULTS, size={"height": 384, "width": 384}, do_center_crop=False, crop_size=None
)
ONEVISION_PINPOINTS = [[384 * h, 384 * w] for h in range(1, 7) for w in range(1, 7)]


class LlavaOnevisionProcessor(LlavaNextProcessor):
    """LlavaOnevisionProcessor: anyres tiles for a lone image, squares for several."""

    image_defaults = ONEVISION_DEFAULTS

    @property
    def pinpoints(self) -> list[list[int]]:
        if self.image.raw.get("image_grid_pinpoints") is None and not self.config_value(
            "image_grid_pinpoints"
        ):
            return ONEVISION_PINPOINTS
        return super().pinpoints

    @property
    def tower_tokens(self) -> int:
        """Tokens the tower gives one tile (its patches, plus a class token where it has one)."""
        size = self.config_value("image_size", 384, section="vision_config")
        patch = self.config_value("patch_size", 14, section="vision_config")
        default = (size // patch) ** 2 + self.additional_tokens
        return integer(self.settings.processor, "num_image_tokens", default, 1, 1 << 20)

    @property
    def strategy(self) -> str:
        default = self.config_value("vision_feature_select_strategy", "full")
        value = self.processor_setting("vision_feature_select_strategy", default)
        if value not in ("default", "full"):
            raise MobiusError(f"unknown vision_feature_select_strategy {value!r}")
        return value

    @property
    def max_tiles(self) -> int:
        """N of ``vision_aspect_ratio`` ``anyres_max_N``: the feature map's size bound."""
        default = self.config_value("vision_aspect_ratio", "anyres_max_9")
        value = self.processor_setting("vision_aspect_ratio", default)
        match = re.fullmatch(r"anyres_max_(\d+)", value) if isinstance(value, str) else None
        if match is None or int(match.group(1)) == 0:
            raise MobiusError(f"vision_aspect_ratio must be anyres_max_N, got {value!r}")
        return int(match.group(1))

    def image_tokens_for(self, size: tuple[int, int], tile: tuple[int, int]) -> int:
        best = select_best_resolution(size, self.pinpoints)
        scale = (best[0] // tile[0], best[1] // tile[1])
        side = int(math.sqrt(self.tower_tokens))
        rows, cols = unpadded_grid(size, (side, side), scale)
        ratio = math.sqrt(rows * cols / (self.max_tiles * side**2))
        if ratio > 1.1:  # shrunk to anyres_max_N tiles' worth
            rows, cols = int(rows // ratio), int(cols // ratio)
        count = rows * cols + rows + self.tower_tokens
        return count - 1 if self.strategy == "default" else count

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        self.count_placeholders(text, images)
        arrays = self.arrays(images)
        if len(arrays) == 1:
            pixels = [self.process(arrays[0])]
            counts = [self.image_tokens_for(image_size(arrays[0]), pixels[0].shape[-2:])]
        else:  # several images in the prompt: each a square, untiled, + a newline token
            colour = tuple(int(m * 255) for m in self.image.image_mean)
            pixels = [self.image.standard(pad_to_square(a, colour))[None] for a in arrays]
            single = self.tower_tokens + 1
            counts = [single - 1 if self.strategy == "default" else single] * len(arrays)
        text = self.expand(text, [self.image_token * n for n in counts])
        inputs = self.tokenize(text)
        if arrays:
            inputs["pixel_values"] = pad_tiles(pixels)
            inputs["image_sizes"] = np.asarray([image_size(a) for a in arrays], np.int64)
            inputs["batch_num_images"] = np.asarray([len(arrays)], np.int64)
        return inputs
