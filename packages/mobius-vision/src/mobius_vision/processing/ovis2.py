"""Ovis2's images: tiles chosen to cover the image (or by aspect ratio), the thumbnail first,
and ``image_seq_length`` ``<IMG_ATOM>`` tokens per tile between the indicator tokens.

An image of one tile is ``<IMG_START>``, its atoms, ``<IMG_GRID>``, ``<IMG_END>``; with a
grid, the thumbnail's atoms come before ``<IMG_GRID>`` and each tile's after it, tiles of
a row separated by ``<IMG_COL>``, rows by ``<IMG_ROW>``.
"""

from __future__ import annotations

import numpy as np

from mobius_vision.processing._image import BICUBIC, flag, image_size, integer
from mobius_vision.processing._tiles import TiledProcessor, closest_grid, grids
from mobius_vision.processing.llava import CLIP_MEAN, CLIP_STD

#: Ovis2ImageProcessor's defaults.
OVIS2_DEFAULTS = dict(
    size={"height": 384, "width": 384}, resample=BICUBIC, image_mean=CLIP_MEAN, image_std=CLIP_STD
)
#: The share of the image the chosen tiles must cover (transformers' covering_threshold).
COVERING_THRESHOLD = 0.9


def _regions(height: int, width: int, grid: tuple[int, int]) -> list[tuple[int, int, int, int]]:
    """The ``(left, upper, right, lower)`` of each cell of ``grid`` (``grid[0]`` rows), the last
    row and column taking the remainder."""
    rows, columns = grid
    row_height, column_width = height // rows, width // columns
    return [
        (
            c * column_width,
            r * row_height,
            width if c == columns - 1 else (c + 1) * column_width,
            height if r == rows - 1 else (r + 1) * row_height,
        )
        for r in range(rows)
        for c in range(columns)
    ]


def _covered_area(left: int, upper: int, right: int, lower: int, side: int) -> float:
    """The area of one region a ``side``-square tile keeps (its long side shrunk to ``side``)."""
    long, short = max(right - left, lower - upper), min(right - left, lower - upper)
    if long > side:
        short, long = short / long * side, side
    return long * short


def covering_grid(size: tuple[int, int], side: int, most: int) -> tuple[int, int]:
    """Ovis2's ``(columns, rows)``: the fewest tiles covering more than 90% of the image
    (the best covering among those), else the best covering; as transformers computes it,
    which reads the candidate's first number as rows when it measures, as columns when it
    cuts."""
    height, width = size
    scored = []
    for grid in grids(1, most):
        covered = sum(_covered_area(*r, side) for r in _regions(height, width, grid))
        scored.append((grid, covered / (height * width)))
    enough = [(grid, ratio) for grid, ratio in scored if ratio > COVERING_THRESHOLD]
    if enough:
        return min(enough, key=lambda s: (s[0][0] * s[0][1], -s[1]))[0]
    return min(scored, key=lambda s: (-s[1], s[0][0] * s[0][1]))[0]


class Ovis2Processor(TiledProcessor):
    """Ovis2Processor over Ovis2ImageProcessor (module docstring)."""

    image_defaults = OVIS2_DEFAULTS

    def crops(self) -> bool:
        return flag(self.image.raw, "crop_to_patches", False)

    def grid(self, size: tuple[int, int]) -> tuple[int, int]:
        if flag(self.image.raw, "use_covering_area_grid", True):
            return covering_grid(size, self.tile_size[0], self.patch_range()[1])
        return closest_grid(size, self.tile_size, *self.patch_range())

    @property
    def image_seq_length(self) -> int:
        return integer(self.settings.processor, "image_seq_length", 256, 1, 1 << 16)

    def layout(self, image: np.ndarray) -> tuple[list[np.ndarray], tuple[int, int]]:
        """One image's tiles (uint8), the thumbnail first when there is a grid, and its
        ``(rows, columns)``."""
        tiles = self.tiles(image)
        if len(tiles) == 1:
            return tiles, (1, 1)
        columns, rows = self.grid(image_size(image))
        return [tiles[-1], *tiles[:-1]], (rows, columns)

    def placeholder(self, rows: int, columns: int) -> str:
        atoms = "<IMG_ATOM>" * self.image_seq_length
        text = f"<IMG_START>{atoms}<IMG_GRID>"
        if rows * columns > 1:
            text += "<IMG_ROW>".join("<IMG_COL>".join([atoms] * columns) for _ in range(rows))
        return text + "<IMG_END>"

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        self.count_placeholders(text, images)
        layouts = [self.layout(image) for image in self.arrays(images)]
        text = self.expand(text, [self.placeholder(*grid) for _, grid in layouts])
        inputs = self.tokenize(text)
        if layouts:
            tiles = [self.image.finish(tile) for tiles, _ in layouts for tile in tiles]
            inputs["pixel_values"] = np.stack(tiles)
        return inputs
