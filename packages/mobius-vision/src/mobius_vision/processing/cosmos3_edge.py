"""Cosmos3 Edge images: GLM-4V's resizing and Qwen-VL's placeholders, patches channels last.

``Cosmos3EdgeImageProcessor`` is ``Glm4vImageProcessor`` with its own defaults (16-pixel
patches, one frame, ImageNet's standard mean and std of 0.5, ``[256^2, 4096^2]`` pixels)
and one change: each patch row holds its pixels row-major with the channels last
(``patch * patch * channels``), where GLM's holds the channels first.
``Cosmos3EdgeProcessor`` writes Qwen-VL's ``<|vision_start|><|image_pad|><|vision_end|>``.
"""

from __future__ import annotations

import numpy as np

from mobius_vision.processing._image import BICUBIC
from mobius_vision.processing.glm4v import Glm4vProcessor
from mobius_vision.processing.qwen_vl import QwenVLProcessor

IMAGENET_STANDARD = (0.5, 0.5, 0.5)


class Cosmos3EdgeProcessor(Glm4vProcessor):
    """Cosmos3EdgeProcessor over images."""

    image_defaults = dict(
        resample=BICUBIC, image_mean=IMAGENET_STANDARD, image_std=IMAGENET_STANDARD
    )
    #: Cosmos3EdgeImageProcessor's defaults.
    default_patch_size, default_merge_size, default_temporal_patch_size = 16, 2, 1
    default_min_pixels, default_max_pixels = 256 * 256, 4096 * 4096
    default_image_token = QwenVLProcessor.default_image_token
    default_vision_start = QwenVLProcessor.default_vision_start
    default_vision_end = QwenVLProcessor.default_vision_end

    def patches(self, image: np.ndarray) -> tuple[np.ndarray, list[int]]:
        rows, grid = super().patches(image)  # [patches, channels * frames * patch * patch]
        p, frames = self.patch_size, self.temporal_patch_size
        channels_first = rows.reshape(len(rows), -1, frames, p, p)
        return channels_first.transpose(0, 3, 4, 1, 2).reshape(len(rows), -1), grid
