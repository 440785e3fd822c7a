"""GOT-OCR2-style tiling (aya_vision, cohere2_vision, internvl): a grid of tiles plus a thumbnail.

The image is resized to ``columns x rows`` tiles of the image processor's ``size`` and cut
row by row; with more than one tile, the whole image resized to one tile (the thumbnail)
comes last. Each tile is then rescaled and normalised; ``pixel_values`` stacks every
image's tiles, ``[tiles, 3, h, w]``. The grid is GOT-OCR2's choice (the aspect ratio
closest to the image's); a family may choose otherwise (:meth:`TiledProcessor.grid`).
"""

from __future__ import annotations

import numpy as np

from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import BICUBIC, image_size, integer, resize
from mobius_vision.processing.llava import CLIP_MEAN, CLIP_STD

#: GotOcr2ImageProcessor's defaults.
GOT_OCR2_DEFAULTS = dict(
    size={"height": 384, "width": 384}, resample=BICUBIC, image_mean=CLIP_MEAN, image_std=CLIP_STD
)


def grids(low: int, high: int) -> list[tuple[int, int]]:
    """Every ``(columns, rows)`` of ``low`` to ``high`` tiles, fewest tiles first."""
    found = [(c, r) for c in range(1, high + 1) for r in range(1, high + 1) if low <= c * r <= high]
    return sorted(found, key=lambda grid: grid[0] * grid[1])


def closest_grid(size, tile: tuple[int, int], low: int, high: int) -> tuple[int, int]:
    """GOT-OCR2's ``(columns, rows)``: the aspect ratio closest to the image's; on a tie the
    grid with more tiles while they cover less than twice the image."""
    height, width = size
    ratio, area = width / height, width * height
    best, best_diff = (1, 1), float("inf")
    for columns, rows in grids(low, high):
        diff = abs(ratio - columns / rows)
        if diff < best_diff:
            best, best_diff = (columns, rows), diff
        elif diff == best_diff and area > 0.5 * tile[0] * tile[1] * columns * rows:
            best = (columns, rows)
    return best


class TiledProcessor(ImageTextProcessor):
    """A processor whose images become GOT-OCR2 tiles (module docstring).

    Tiling is on: the processors of these families pass ``crop_to_patches=True``, which
    wins over the image processor's own setting (a family where it does not overrides
    :meth:`crops`).
    """

    image_defaults = GOT_OCR2_DEFAULTS

    @property
    def tile_size(self) -> tuple[int, int]:
        size = self.image.size
        return size["height"], size["width"]

    def crops(self) -> bool:
        """Whether images are cut into tiles."""
        return True

    def patch_range(self) -> tuple[int, int]:
        low = integer(self.image.raw, "min_patches", 1, 1, 1 << 10)
        return low, integer(self.image.raw, "max_patches", 12, low, 1 << 10)

    def grid(self, size: tuple[int, int]) -> tuple[int, int]:
        """``(columns, rows)`` of the tiles for an image of ``size``."""
        return closest_grid(size, self.tile_size, *self.patch_range())

    def tiles(self, image: np.ndarray) -> list[np.ndarray]:
        """One image's tiles (uint8): the grid's, then the thumbnail; or the image resized."""
        tile_h, tile_w = self.tile_size
        if not (self.crops() and self.patch_range()[1] > 1):
            return [resize(image, (tile_h, tile_w), self.image.resample)]
        columns, rows = self.grid(image_size(image))
        canvas = resize(image, (tile_h * rows, tile_w * columns), self.image.resample)
        tiles = [
            canvas[:, r * tile_h : (r + 1) * tile_h, c * tile_w : (c + 1) * tile_w]
            for r in range(rows)
            for c in range(columns)
        ]
        if len(tiles) > 1:
            tiles.append(resize(image, (tile_h, tile_w), self.image.resample))
        return tiles

    def expansion(self, tiles: int) -> str:
        """The text an image of ``tiles`` tiles puts in place of its placeholder."""
        raise NotImplementedError

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        self.count_placeholders(text, images)
        per_image = [self.tiles(image) for image in self.arrays(images)]
        text = self.expand(text, [self.expansion(len(tiles)) for tiles in per_image])
        inputs = self.tokenize(text)
        if per_image:
            tiles = [self.image.finish(tile) for image in per_image for tile in image]
            inputs["pixel_values"] = np.stack(tiles)
        return inputs
