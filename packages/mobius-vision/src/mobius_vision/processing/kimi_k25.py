"""Kimi K2.5's images: padded (never resized here) to whole merge blocks, then cut into
patches row-major.

What ``Kimi_K25ImageProcessor`` and ``Kimi_K25Processor`` do, without torch: an image
within the patch budget (at most ``max_patches`` patches and ``size["max_height"]``
patches a side; transformers' ``navit_resize``) keeps its size and is padded with black
at the bottom and right to multiples of ``patch_size * merge_size``, rescaled,
normalised and cut into ``[3, patch, patch]`` squares, row by row: ``pixel_values``
``[patches, 3, patch, patch]`` and ``image_grid_thw`` ``[1, rows, columns]`` per image.
Each placeholder becomes one token per merge block. A larger image would be shrunk by
torchvision's bicubic resize, which is not reproduced: it is refused, with the size to
shrink it to.
"""

from __future__ import annotations

import math

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import image_size, integer, pad


def navit_size(height: int, width: int, patch: int, max_patches: int, side: int) -> tuple[int, int]:
    """The size ``navit_resize`` gives an image: scaled down (never up) to at most
    ``max_patches`` patches and ``side`` patches a side."""
    scale = min(
        1.0,
        math.sqrt(max_patches / (max(1, height // patch) * max(1, width // patch))),
        side * patch / height,
        side * patch / width,
    )
    new_height = min(max(1, int(height * scale)), side * patch)
    return new_height, min(max(1, int(width * scale)), side * patch)


class KimiK25Processor(ImageTextProcessor):
    """Kimi_K25Processor over images (``<|media_pad|>`` once per image)."""

    image_defaults = dict(size={"max_height": 512, "max_width": 512})

    @property
    def image_token(self) -> str:
        return self.token_text("image_token", "<|media_pad|>")

    def patch_settings(self) -> tuple[int, int, int, int]:
        """``(patch_size, merge_size, max_patches, patches a side at most)``, checked."""
        raw = self.image.raw
        side = self.image.size.get("max_height")
        if side is None or side != self.image.size.get("max_width"):
            raise MobiusError(f"preprocessor setting size {self.image.size} is not a square bound")
        return (
            integer(raw, "patch_size", 14, 1, 1 << 10),
            integer(raw, "merge_size", 2, 1, 1 << 4),
            integer(raw, "max_patches", 16384, 1),
            side,
        )

    def patches(self, image: np.ndarray) -> tuple[np.ndarray, list[int]]:
        """One ``[3, h, w]`` uint8 image's ``[patches, 3, patch, patch]`` and its grid."""
        patch, merge, max_patches, side = self.patch_settings()
        height, width = image_size(image)
        if self.image.do_resize:
            target = navit_size(height, width, patch, max_patches, side)
            if target != (height, width):
                raise MobiusError(
                    f"an image of {height}x{width} pixels is over Kimi K2.5's patch budget: "
                    f"shrink it to {target[0]}x{target[1]} first (its bicubic resize is "
                    "torchvision's, not reproduced here)"
                )
            block = patch * merge
            image = pad(image, (-(-height // block) * block, -(-width // block) * block))
        pixels = self.image.finish(image)
        channels, height, width = pixels.shape
        rows, columns = height // patch, width // patch
        grid = pixels.reshape(channels, rows, patch, columns, patch).transpose(1, 3, 0, 2, 4)
        return grid.reshape(rows * columns, channels, patch, patch), [1, rows, columns]

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        self.count_placeholders(text, images)
        merge = self.patch_settings()[1]
        pieces = [self.patches(image) for image in self.arrays(images)]
        tokens = [
            self.image_token * (rows * columns // merge**2) for _, (_, rows, columns) in pieces
        ]
        inputs = self.tokenize(self.expand(text, tokens))
        if pieces:
            inputs["pixel_values"] = np.concatenate([p for p, _ in pieces])
            inputs["image_grid_thw"] = np.array([grid for _, grid in pieces], dtype=np.int64)
        return inputs
