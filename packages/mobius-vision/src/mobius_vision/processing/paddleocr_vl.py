"""PaddleOCR-VL images: Qwen2-VL's resize and normalisation, patches kept square and in row order.

``PaddleOCRVLImageProcessor`` differs from ``Qwen2VLImageProcessor`` (the rest is
:class:`~.qwen_vl.QwenVLProcessor`'s) in three things: a side shorter than one merge
block is scaled up to it first (the other side in proportion), the default pixel bounds
are 384^2 and 1536^2, and ``pixel_values`` are ``[patches, channels, patch, patch]`` in row
order (no merge-block order: the projector merges after the tower), one frame each.
``PaddleOCRVLProcessor`` expands the tokenizer's ``image_token`` to one per merge block
and returns ``mm_token_type_ids``; positions are Qwen-VL's M-RoPE.
"""

from __future__ import annotations

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._image import resize
from mobius_vision.processing.qwen_vl import QwenVLProcessor, smart_resize


class PaddleOCRVLProcessor(QwenVLProcessor):
    """Qwen-VL's processor with PaddleOCR-VL's resize bounds and square row-order patches."""

    default_patch_size, default_merge_size, default_temporal_patch_size = 14, 2, 1
    default_min_pixels, default_max_pixels = 384 * 384, 1536 * 1536
    default_image_token = "<|IMAGE_PLACEHOLDER|>"
    default_vision_start, default_vision_end = "<|IMAGE_START|>", "<|IMAGE_END|>"

    def resized_size(self, height: int, width: int) -> tuple[int, int]:
        """Qwen-VL's size after a side under one merge block is scaled up to one."""
        factor = self.patch_size * self.merge_size
        if height < factor:
            height, width = factor, round(width * factor / height)
        if width < factor:
            height, width = round(height * factor / width), factor
        return smart_resize(height, width, factor, *self.pixel_bounds)

    def patches(self, image: np.ndarray) -> tuple[np.ndarray, list[int]]:
        """One ``[3, h, w]`` uint8 image as ``[patches, 3 * t, patch, patch]`` in row order."""
        patch, block = self.patch_size, self.patch_size * self.merge_size
        if self.image.do_resize:
            image = resize(image, self.resized_size(*image.shape[-2:]), self.image.resample)
        channels, height, width = image.shape
        if height % block or width % block:
            raise MobiusError(
                f"an image of {height}x{width} pixels is not made of {block}-pixel "
                "merge blocks (turn do_resize on)"
            )
        rows, columns = height // patch, width // patch
        pixels = self.image.finish(image).reshape(channels, rows, patch, columns, patch)
        # [patches, channels, 1, patch, patch]: each channel repeated over time
        count, frames = rows * columns, self.temporal_patch_size
        pixels = pixels.transpose(1, 3, 0, 2, 4).reshape(count, channels, 1, patch, patch)
        pixels = np.broadcast_to(pixels, (count, channels, frames, patch, patch))
        return pixels.reshape(count, channels * frames, patch, patch), [1, rows, columns]
