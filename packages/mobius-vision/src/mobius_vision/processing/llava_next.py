"""LLaVA-NeXT's "anyres" images (llava_next, llava_next_video): the whole image plus tiles.

Each image is fitted into the best of ``image_grid_pinpoints`` (the grid that keeps the
most of its pixels, then the least waste), padded to it centred with black, and cut
into tiles of the tower's size; the whole image resized to one tile goes first. Every
tile then gets CLIP's pipeline. ``pixel_values`` is ``[images, tiles, 3, h, w]`` (images
with fewer tiles padded with zeros), ``image_sizes`` each image's ``(height, width)``.

The ``<image>`` placeholder becomes the tower's tokens for the whole image, plus those
of the tile grid with the padding rows or columns taken off ("unpadded") and one
newline token per row.
"""

from __future__ import annotations

import math

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._image import image_size, resize
from mobius_vision.processing.llava import CLIP_DEFAULTS, LlavaProcessor

#: LlavaNextImageProcessor's pinpoints (height, width) where neither the preprocessor nor
#: the config lists them.
DEFAULT_PINPOINTS = [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]


def select_best_resolution(size: tuple[int, int], pinpoints) -> tuple[int, int]:
    """The pinpoint ``(height, width)`` that shows most of an image of ``size`` (downscaled to
    fit), and of those the one that wastes the fewest pixels."""
    height, width = size
    best, most, least_waste = None, 0, math.inf
    for target_h, target_w in pinpoints:
        scale = min(target_w / width, target_h / height)
        shown = min(int(width * scale) * int(height * scale), width * height)
        waste = target_w * target_h - shown
        if shown > most or (shown == most and waste < least_waste):
            best, most, least_waste = (target_h, target_w), shown, waste
    return best


def fit_size(size: tuple[int, int], target: tuple[int, int]) -> tuple[int, int]:
    """The size an image of ``size`` takes inside ``target``, its ratio kept (rounded up)."""
    (height, width), (target_h, target_w) = size, target
    if target_w / width < target_h / height:
        return min(math.ceil(height * target_w / width), target_h), target_w
    return target_h, min(math.ceil(width * target_h / height), target_w)


def unpadded_grid(size, patches: tuple[int, int], scale: tuple[int, int]) -> tuple[int, int]:
    """``(rows, columns)`` of the tile grid's feature map with the padding taken off.

    ``size`` is the image's ``(height, width)``, ``patches`` a tile's patches per side and
    ``scale`` the grid's tiles per side.
    """
    height, width = size
    rows, cols = patches[0] * scale[0], patches[1] * scale[1]
    if width / height > cols / rows:  # wider than the grid: padding above and below
        rows -= (rows - int(round(height * (cols / width), 7))) // 2 * 2
    else:
        cols -= (cols - int(round(width * (rows / height), 7))) // 2 * 2
    return rows, cols


def pinpoints_setting(value, name: str = "image_grid_pinpoints") -> list[list[int]]:
    """The pinpoints checked: a list of ``[height, width]`` positive ints."""
    if (
        not isinstance(value, list)
        or not value
        or not all(
            isinstance(p, list)
            and len(p) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and 0 < v < 1 << 16 for v in p)
            for p in value
        )
    ):
        raise MobiusError(f"{name} must be a list of [height, width] sizes, got {value!r}")
    return value


class LlavaNextProcessor(LlavaProcessor):
    """LlavaNextProcessor (and LlavaNextVideoProcessor's images): anyres tiles, image_sizes."""

    image_defaults = CLIP_DEFAULTS

    @property
    def pinpoints(self) -> list[list[int]]:
        value = self.image.raw.get("image_grid_pinpoints")
        if value is None:
            value = self.config_value("image_grid_pinpoints", DEFAULT_PINPOINTS)
        return pinpoints_setting(value)

    @property
    def tile(self) -> int:
        """A tile's side in pixels before the per-tile resize (the crop, else the size)."""
        crop, size = self.image.crop_size or {}, self.image.size
        return crop.get("height") or size.get("height") or size["shortest_edge"]

    def whole_size(self) -> tuple[int, int]:
        """The size the whole image is resized to, beside its tiles."""
        size = self.image.size
        if "height" in size and "width" in size:
            return size["height"], size["width"]
        return size["shortest_edge"], size["shortest_edge"]

    def tiles(self, image: np.ndarray) -> list[np.ndarray]:
        """The whole image then its tiles (uint8, before the per-tile pipeline)."""
        best = select_best_resolution(image_size(image), self.pinpoints)
        fitted = resize(image, fit_size(image_size(image), best), self.image.resample)
        (height, width), (target_h, target_w) = image_size(fitted), best
        top, left = (target_h - height) // 2, (target_w - width) // 2
        padded = np.zeros((image.shape[0], target_h, target_w), dtype=image.dtype)
        padded[:, top : top + height, left : left + width] = fitted
        tile = self.tile
        cut = [
            padded[:, row : row + tile, col : col + tile]
            for row in range(0, target_h, tile)
            for col in range(0, target_w, tile)
        ]
        return [resize(image, self.whole_size(), self.image.resample), *cut]

    def process(self, image: np.ndarray) -> np.ndarray:
        """One image's ``[tiles, 3, h, w]`` float32 pixels."""
        return np.stack([self.image.standard(tile) for tile in self.tiles(image)])

    def image_tokens_for(self, size: tuple[int, int], tile: tuple[int, int]) -> int:
        """Tokens of an image of ``size`` whose tiles are ``tile`` pixels after processing."""
        best = select_best_resolution(size, self.pinpoints)
        scale = (best[0] // tile[0], best[1] // tile[1])
        patches = (tile[0] // self.patch_size, tile[1] // self.patch_size)
        rows, cols = unpadded_grid(size, patches, scale)
        # the unpadded map, a newline token per row, the whole image's tokens
        count = rows * cols + rows + patches[0] * patches[1] + self.additional_tokens
        return count - 1 if self.strategy == "default" else count

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        self.count_placeholders(text, images)
        arrays = self.arrays(images)
        pixels = [self.process(image) for image in arrays]
        if pixels:
            tile = pixels[0].shape[-2:]
            counts = [self.image_tokens_for(image_size(a), tile) for a in arrays]
            text = self.expand(text, [self.image_token * n for n in counts])
        inputs = self.tokenize(text)
        if pixels:
            inputs["pixel_values"] = pad_tiles(pixels)
            inputs["image_sizes"] = np.asarray([image_size(a) for a in arrays], np.int64)
        return inputs


def pad_tiles(pixels: list[np.ndarray]) -> np.ndarray:
    """``[images, tiles, 3, h, w]``: images with fewer tiles padded with zero tiles."""
    most = max(len(p) for p in pixels)
    return np.stack([np.pad(p, ((0, most - len(p)), (0, 0), (0, 0), (0, 0))) for p in pixels])
