"""Llama 4's images: tiles on the best canvas plus a global tile, and the ``<|patch|>`` layout.

What ``Llama4ImageProcessor`` and ``Llama4Processor`` do, without torch. Each image
picks the canvas of whole ``size`` tiles (at most ``max_patches``) that needs the least
upscaling, or else the least downscaling (the smaller canvas on ties; Mllama's rule,
shared); it is resized to fit (ratio kept, never upscaled past one tile), zero-padded at
the bottom and right, rescaled, normalised and cut into tiles row by row. With more than
one tile, the whole image resized to one tile (distorted) follows as the global tile.
``pixel_values`` stacks every image's tiles, ``[tiles, 3, tile, tile]``.

The prompt's ``<|image|>`` becomes ``<|image_start|>``, for a multi-tile image each tile
row's tiles as runs of ``<|patch|>`` split by ``<|tile_x_separator|>`` and ended by
``<|tile_y_separator|>``, then ``<|image|>``, the global tile's ``<|patch|>`` run and
``<|image_end|>``; a run holds ``(tile / patch_size)² / downsample`` tokens.

transformers' image processor exists only as a torchvision class: this one resizes with
torchvision's uint8 antialiased bilinear arithmetic (:mod:`._antialias`, not PIL's) and
rescales and normalises in bfloat16 as it does (each step rounded to bfloat16), handing
the values out as float32.
"""

from __future__ import annotations

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._antialias import resize_antialiased
from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import BILINEAR, flag, integer, number, pad
from mobius_vision.processing.mllama import best_canvas, fit_to_canvas, tile_layouts

#: Llama4ImageProcessor's defaults.
LLAMA4_DEFAULTS = dict(
    size={"height": 336, "width": 336},
    resample=BILINEAR,
    image_mean=(0.5, 0.5, 0.5),
    image_std=(0.5, 0.5, 0.5),
)


def _bf16(x) -> np.ndarray:
    """``x`` rounded to bfloat16 (to nearest, ties to even), held as float32."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def largest_canvas(height: int, width: int, max_tiles: int, tile: int) -> tuple[int, int]:
    """``resize_to_max_canvas``: the canvas that upscales most (else downscales least)."""
    canvases = [(rows * tile, columns * tile) for rows, columns in tile_layouts(max_tiles)]
    scales = [min(h / height, w / width) for h, w in canvases]
    up = [s for s in scales if s >= 1]
    chosen = max(up) if up else max(scales)
    fitting = [c for c, s in zip(canvases, scales, strict=True) if s == chosen]
    return min(fitting, key=lambda c: c[0] * c[1])


def fill_canvas(height: int, width: int, canvas: tuple[int, int]) -> tuple[int, int]:
    """The largest size of an image's ratio (sides floored) inside ``canvas``."""
    scale_h, scale_w = canvas[0] / height, canvas[1] / width
    if scale_w < scale_h:
        return max(min(int(height * scale_w), canvas[0]), 1), canvas[1]
    return canvas[0], max(min(int(width * scale_h), canvas[1]), 1)


def image_prompt(rows: int, columns: int, tokens_per_tile: int) -> str:
    """The text an image of ``rows x columns`` tiles puts in place of its ``<|image|>``."""
    run = "<|patch|>" * tokens_per_tile
    text = "<|image_start|>"
    if rows * columns > 1:
        row = "<|tile_x_separator|>".join([run] * columns)
        text += (row + "<|tile_y_separator|>") * rows
    return text + "<|image|>" + run + "<|image_end|>"


class Llama4Processor(ImageTextProcessor):
    """Llama4Processor: tiled images whose adapter tokens replace ``<|patch|>`` runs."""

    image_token = "<|image|>"
    image_defaults = LLAMA4_DEFAULTS

    @property
    def tile_size(self) -> int:
        size = self.image.size
        if size.get("height") is None or size.get("height") != size.get("width"):
            raise MobiusError(f"Llama 4's preprocessor size must be a square tile, got {size}")
        return size["height"]

    @property
    def tokens_per_tile(self) -> int:
        """``(tile // patch_size)² // downsample``, the processor's own arithmetic."""
        vision = "vision_config"  # the processor's own settings first, then the model's
        patch = self.processor_setting(
            "patch_size", self.config_value("patch_size", 14, section=vision)
        )
        ratio = self.processor_setting(
            "pixel_shuffle_ratio", self.config_value("pixel_shuffle_ratio", 0.5, section=vision)
        )
        patch = integer({"patch_size": patch}, "patch_size", 14, 1, 1 << 12)
        ratio = number({"pixel_shuffle_ratio": ratio}, "pixel_shuffle_ratio", 0.5)
        if not 0 < ratio <= 1:
            raise MobiusError(f"processor setting pixel_shuffle_ratio {ratio} is not in (0, 1]")
        downsample = int(round(1.0 / ratio**2))
        side = self.tile_size // patch
        return side * side // downsample

    def finish(self, image: np.ndarray) -> np.ndarray:
        """Rescale and normalise as transformers does it, in bfloat16 (module docstring)."""
        settings = self.image
        pixels = image.astype(np.float32)
        if settings.do_rescale:
            pixels = _bf16(pixels * np.float32(settings.rescale_factor))
        if settings.do_normalize:
            mean = _bf16(settings.image_mean)[:, None, None]
            std = _bf16(settings.image_std)[:, None, None]
            pixels = _bf16(_bf16(pixels - mean) / std)
        return pixels

    def resize(self, image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
        """torchvision's bilinear resize, the only filter reproduced exactly."""
        if self.image.resample != BILINEAR:
            raise MobiusError(
                f"Llama 4 images: mobius resizes with the bilinear filter only, not resample "
                f"{self.image.resample}"
            )
        return resize_antialiased(image, size)

    def tiles(self, image: np.ndarray) -> tuple[np.ndarray, tuple[int, int]]:
        """One ``[3, h, w]`` uint8 image as its tiles ``[tiles, 3, tile, tile]`` (the global
        tile last when there are several) and the canvas's ``(rows, columns)``."""
        tile, raw = self.tile_size, self.image.raw
        max_tiles = integer(raw, "max_patches", 16, 1, 256)
        height, width = image.shape[-2:]
        if flag(raw, "resize_to_max_canvas", False):
            canvas = largest_canvas(height, width, max_tiles, tile)
            fitted = fill_canvas(height, width, canvas)
        else:
            canvas = best_canvas(height, width, max_tiles, tile)
            fitted = fit_to_canvas(height, width, canvas, tile)
        resized = self.resize(image, fitted)
        pixels = self.finish(pad(resized, canvas))
        rows, columns = canvas[0] // tile, canvas[1] // tile
        tiles = pixels.reshape(3, rows, tile, columns, tile).transpose(1, 3, 0, 2, 4)
        tiles = tiles.reshape(rows * columns, 3, tile, tile)
        if rows * columns > 1:
            whole = self.finish(self.resize(image, (tile, tile)))
            tiles = np.concatenate([tiles, whole[None]])
        return tiles, (rows, columns)

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        self.count_placeholders(text, images)
        tiled = [self.tiles(image) for image in self.arrays(images)]
        per_tile = self.tokens_per_tile
        text = self.expand(text, [image_prompt(*grid, per_tile) for _, grid in tiled])
        inputs = self.tokenize(text)
        if tiled:
            inputs["pixel_values"] = np.concatenate([tiles for tiles, _ in tiled])
        return inputs
