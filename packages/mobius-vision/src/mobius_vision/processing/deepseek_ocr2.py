"""DeepSeek-OCR 2's images: a global view per image, and local tiles when it is large.

``pixel_values``: the image's longer side resized to ``size`` (1024; the other rounded),
centred on a square of ``background_color`` (127 grey). ``pixel_values_local``: when
``crop_to_patches`` and the longer side exceeds ``tile_size`` (768), the image resized
to GOT-OCR2's grid of ``min_patches`` to ``max_patches`` tiles and cut row by row; all
images' tiles stacked (none: an empty batch). ``num_local_patches``: each image's tile
count. A placeholder becomes ``ceil(size / patch_size / downsample_ratio)^2`` tokens for
the global view, as many per tile of ``tile_size``, and one for the view separator.
"""

from __future__ import annotations

import math

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import flag, image_size, integer, pad_to_square, resize
from mobius_vision.processing._tiles import GOT_OCR2_DEFAULTS, closest_grid

#: DeepseekOcr2ImageProcessor's defaults beyond GOT-OCR2's.
DEFAULTS = dict(
    GOT_OCR2_DEFAULTS,
    size={"height": 1024, "width": 1024},
    image_mean=(0.5, 0.5, 0.5),
    image_std=(0.5, 0.5, 0.5),
)
#: SAM patches a side of a tile (the model's, :mod:`mobius_vision.models.deepseek_ocr2`).
TILE_GRID = 48


class DeepseekOcr2Processor(ImageTextProcessor):
    """DeepseekOcr2Processor: ``<image>`` per image, a global view and tiles each."""

    image_defaults = DEFAULTS

    @property
    def tile_size(self) -> int:
        return integer(self.image.raw, "tile_size", 768, 1, 1 << 14)

    def check_sizes(self) -> None:
        """The global view and tile sizes the built graph takes (SAM's size, 48 patches)."""
        vision = self.config_value("vision_config", {})
        sam = vision.get("sam_config") if isinstance(vision, dict) else None
        sam = sam if isinstance(sam, dict) else {}
        size, patch = sam.get("image_size", 1024), sam.get("patch_size", 16)
        wanted = (self.image.size.get("height"), self.tile_size)
        if (size, TILE_GRID * patch) != wanted:
            raise MobiusError(
                f"deepseek_ocr2: the image processor's size {wanted[0]} and tile_size "
                f"{wanted[1]} are not the model's {size} and {TILE_GRID * patch}"
            )

    def tokens_per_view(self, side: int) -> int:
        patch = integer(self.settings.processor, "patch_size", 16, 1, 1 << 10)
        ratio = integer(self.settings.processor, "downsample_ratio", 4, 1, 1 << 10)
        return math.ceil(side / patch / ratio) ** 2

    def tiles(self, image: np.ndarray) -> list[np.ndarray]:
        """The image's local tiles (uint8), row by row; none when it fits a tile."""
        tile = self.tile_size
        crops = flag(self.image.raw, "crop_to_patches", True)
        if not crops or max(image_size(image)) <= tile:
            return []
        low = integer(self.image.raw, "min_patches", 2, 1, 1 << 10)
        high = integer(self.image.raw, "max_patches", 6, low, 1 << 10)
        columns, rows = closest_grid(image_size(image), (tile, tile), low, high)
        canvas = resize(image, (tile * rows, tile * columns), self.image.resample)
        return [
            canvas[:, r * tile : (r + 1) * tile, c * tile : (c + 1) * tile]
            for r in range(rows)
            for c in range(columns)
        ]

    def global_view(self, image: np.ndarray) -> np.ndarray:
        """The longer side resized to ``size``, centred on a ``background_color`` square."""
        side = self.image.size["height"]
        height, width = image_size(image)
        scale = side / max(height, width)
        image = resize(image, (round(height * scale), round(width * scale)), self.image.resample)
        colour = self.image.raw.get("background_color", [127, 127, 127])
        if not (
            isinstance(colour, list)
            and len(colour) == 3
            and all(isinstance(c, int) and 0 <= c <= 255 for c in colour)
        ):
            raise MobiusError(f"setting background_color must be three ints, got {colour!r}")
        return pad_to_square(image, tuple(colour))

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        self.count_placeholders(text, images)
        if images:
            self.check_sizes()
        arrays = self.arrays(images)
        tiles = [self.tiles(image) for image in arrays]
        side = self.image.size["height"]
        expansions = [
            self.image_token
            * (self.tokens_per_view(side) + len(own) * self.tokens_per_view(self.tile_size) + 1)
            for own in tiles
        ]
        inputs = self.tokenize(self.expand(text, expansions))
        if images:
            tile = self.tile_size
            local = [self.image.finish(t) for own in tiles for t in own]
            inputs["pixel_values"] = np.stack(
                [self.image.finish(self.global_view(a)) for a in arrays]
            )
            inputs["pixel_values_local"] = (
                np.stack(local) if local else np.zeros((0, 3, tile, tile), np.float32)
            )
            inputs["num_local_patches"] = np.asarray([len(own) for own in tiles], np.int64)
        return inputs
