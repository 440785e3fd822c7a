"""Gemma 4's images: an aspect-ratio-preserving resize within a patch budget, cut into patches.

Each image is resized (bicubic) to the largest size whose sides are multiples of
``pooling_kernel_size * patch_size`` and whose patches number at most
``max_soft_tokens * pooling_kernel_size^2``, rescaled to [0, 1] (no normalisation), cut
into ``patch_size`` patches row-major (each ``[row, column, channel]`` flattened), and
padded with zero patches to the budget. ``image_position_ids`` hold each patch's
``(column, row)``, ``(-1, -1)`` on padding. In the prompt each image placeholder becomes
``<boi>`` + one image token per pooled patch block + ``<eoi>``; ``mm_token_type_ids``
mark image tokens 1 (video 2, audio 3), as Gemma4Processor returns them.
"""

from __future__ import annotations

import math

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import BICUBIC, image_size, integer, rescale, resize

#: The soft-token budgets transformers' Gemma 4 image processor accepts.
SOFT_TOKEN_BUDGETS = (70, 140, 280, 560, 1120)


def budget_size(height: int, width: int, patch: int, max_patches: int, kernel: int):
    """``(height, width)`` Gemma 4 resizes an image to: the ratio kept, sides multiples of
    ``kernel * patch``, at most ``max_patches`` patches."""
    factor = math.sqrt(max_patches * patch**2 / (height * width))
    side = kernel * patch
    target_h = int(math.floor(factor * height / side)) * side
    target_w = int(math.floor(factor * width / side)) * side
    if target_h == 0 and target_w == 0:
        raise MobiusError(f"a {height}x{width} image is too small for Gemma 4's patch grid")
    longest = (max_patches // kernel**2) * side
    if target_h == 0:  # a very wide image: one block high
        target_h, target_w = side, min(int(math.floor(width / height)) * side, longest)
    elif target_w == 0:
        target_w, target_h = side, min(int(math.floor(height / width)) * side, longest)
    if target_h * target_w > max_patches * patch**2:
        raise MobiusError(f"a {height}x{width} image does not fit Gemma 4's {max_patches} patches")
    return target_h, target_w


def patches_of(image: np.ndarray, patch: int) -> np.ndarray:
    """``[c, h, w]`` to ``[patches, patch * patch * c]``, row-major, each patch HWC-flattened."""
    channels, height, width = image.shape
    rows, cols = height // patch, width // patch
    grid = image.reshape(channels, rows, patch, cols, patch).transpose(1, 3, 2, 4, 0)
    return grid.reshape(rows * cols, -1)


class Gemma4Processor(ImageTextProcessor):
    """Gemma4Processor over images: patches, their positions, the image blocks in the prompt."""

    image_defaults = dict(resample=BICUBIC)

    @property
    def image_token(self) -> str:
        return self.token_text("image_token", "<|image|>")

    def _image_setting(self, name: str, default: int, low: int, high: int) -> int:
        return integer(self.image.raw, name, default, low, high)

    def patch_settings(self) -> tuple[int, int, int]:
        """The image processor's ``patch_size``, ``pooling_kernel_size`` and ``max_soft_tokens``, checked."""
        patch = self._image_setting("patch_size", 16, 1, 1024)
        kernel = self._image_setting("pooling_kernel_size", 3, 1, 64)
        budget = self._image_setting("max_soft_tokens", 280, 1, 1 << 16)
        if budget not in SOFT_TOKEN_BUDGETS:
            raise MobiusError(f"max_soft_tokens must be one of {SOFT_TOKEN_BUDGETS}, got {budget}")
        return patch, kernel, budget

    def pixels(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """One image's padded patches, their positions, and its number of soft tokens."""
        return self.cut(image, *self.patch_settings())

    def cut(self, image: np.ndarray, patch: int, kernel: int, budget: int):
        """:meth:`pixels` of ``image``: ``patch`` pixels a side, ``budget`` soft tokens of
        ``kernel x kernel`` patches."""
        max_patches = budget * kernel**2
        size = budget_size(*image_size(image), patch, max_patches, kernel)
        if self.image.do_resize and size != image_size(image):
            image = resize(image, size, self.image.resample)
        if self.image.do_rescale:
            image = rescale(image, self.image.rescale_factor)
        patches = patches_of(image.astype(np.float32), patch)
        rows, cols = image.shape[1] // patch, image.shape[2] // patch
        columns, rows_ = np.meshgrid(np.arange(cols), np.arange(rows), indexing="xy")
        positions = np.stack([columns, rows_], axis=-1).reshape(-1, 2).astype(np.int64)
        pad = max_patches - len(patches)
        patches = np.pad(patches, [(0, pad), (0, 0)])
        positions = np.pad(positions, [(0, pad), (0, 0)], constant_values=-1)
        return patches, positions, (rows * cols) // kernel**2

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        self.count_placeholders(text, images)
        pixels = [self.pixels(image) for image in self.arrays(images)]
        begin = self.token_text("boi_token", "<|image>")
        end = self.token_text("eoi_token", "<image|>")
        blocks = [f"{begin}{self.image_token * tokens}{end}" for *_, tokens in pixels]
        inputs = self.tokenize(self.expand(text, blocks))
        inputs["mm_token_type_ids"] = self.token_types(inputs["input_ids"])
        if pixels:
            inputs["pixel_values"] = np.stack([p for p, _, _ in pixels])
            inputs["image_position_ids"] = np.stack([q for _, q, _ in pixels])
        return inputs

    def token_types(self, input_ids: np.ndarray) -> np.ndarray:
        """1 on image tokens, 2 on video tokens, 3 on audio tokens, else 0."""
        types = np.zeros_like(input_ids)
        # Gemma4Processor adds the video token itself, under this name
        tokens = (self.image_token, "<|video|>", getattr(self.tokenizer, "audio_token", None))
        for kind, token in enumerate(tokens, 1):
            token_id = self.tokenizer.convert_tokens_to_ids(token) if token else None
            if token_id is not None and token_id != self.tokenizer.unk_token_id:
                types[input_ids == token_id] = kind
        return types
