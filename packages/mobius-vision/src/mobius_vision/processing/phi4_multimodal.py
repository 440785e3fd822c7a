"""Phi-4-multimodal's images: the HD crops of each image, its global view, their patch masks.

transformers has this image processor on its torchvision backend only; here it is
numpy, with torchvision's arithmetic where it resizes (:mod:`._antialias` for the
bilinear resize of the uint8 image, :func:`torch_bicubic` for the global view).

Each image is resized (aspect kept) into a grid of ``size x size`` crops, padded white
on the right and bottom; the grid is the image's own size in crops, or, past
``dynamic_hd`` crops, the grid of closest aspect ratio. Its outputs (per image, padded
to the batch's most crops): ``image_pixel_values`` (the global view, then the crops
row by row), ``image_attention_mask`` (the real patches of each), ``image_sizes``
(the grid's size in pixels); the prompt's placeholder becomes one image token per
feature the model makes (global view and real sub-grid, rows ended, one separator).
"""

from __future__ import annotations

import math

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._antialias import resize_antialiased
from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import integer

_CUBIC_A = -0.75  # PyTorch's bicubic


def _cubic_weights(t: np.ndarray) -> np.ndarray:
    """``[n, 4]`` float32: PyTorch's cubic convolution weights at fractions ``t``."""
    a = np.float32(_CUBIC_A)

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    one = np.float32(1)
    return np.stack([far(t + one), near(t), near(one - t), far(2 - t)], axis=1)


def _bicubic_axis(image: np.ndarray, out_size: int, axis: int) -> np.ndarray:
    in_size = image.shape[axis]
    scale = np.float32(in_size) / np.float32(out_size)
    source = scale * (np.arange(out_size, dtype=np.float32) + np.float32(0.5)) - np.float32(0.5)
    first = np.floor(source)
    weights = _cubic_weights((source - first).astype(np.float32))  # [out, 4]
    index = np.clip(first.astype(np.int64)[:, None] + np.arange(-1, 3), 0, in_size - 1)
    taps = np.take(image, index, axis=axis)  # axis -> (out, 4)
    shape = [1] * taps.ndim
    shape[axis], shape[axis + 1] = out_size, 4
    return (taps * weights.reshape(shape)).sum(axis=axis + 1, dtype=np.float32)


def torch_bicubic(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A float32 ``[c, h, w]`` image resized as ``torch.nn.functional.interpolate(...,
    mode="bicubic", align_corners=False, antialias=False)`` does (edge pixels repeated)."""
    image = _bicubic_axis(image.astype(np.float32), size[1], 2)
    return _bicubic_axis(image, size[0], 1)


def closest_aspect_ratio(height: int, width: int, tile: int, max_crops: int) -> tuple[int, int]:
    """``(columns, rows)`` of at most ``max_crops`` crops whose ratio is closest to the image's;
    a tie goes to the larger grid when the image covers over half of it (transformers' rule)."""
    ratios = {
        (i, j)
        for n in range(1, max_crops + 1)
        for i in range(1, n + 1)
        for j in range(1, n + 1)
        if i * j <= max_crops
    }
    aspect, best, best_diff = width / height, (1, 1), float("inf")
    for ratio in sorted(ratios, key=lambda r: r[0] * r[1]):
        diff = abs(aspect - ratio[0] / ratio[1])
        if diff < best_diff:
            best, best_diff = ratio, diff
        elif diff == best_diff and width * height > 0.5 * tile * tile * ratio[0] * ratio[1]:
            best = ratio
    return best


def hd_canvas(height: int, width: int, tile: int, patch: int, max_crops: int):
    """``(grid (columns, rows), resized (height, width), patch mask [rows*m, columns*m])`` of
    an image: the canvas of crops it fills, aspect kept, and which patches are real."""
    columns, rows = math.ceil(width / tile), math.ceil(height / tile)
    if columns * rows > max_crops:
        columns, rows = closest_aspect_ratio(height, width, tile, max_crops)
    target_h, target_w = tile * rows, tile * columns
    if target_w / width < target_h / height:
        resized = (int(height * (target_w / width)), target_w)
    else:
        resized = (target_h, int(width * (target_h / height)))
    if min(resized[0], target_h) < 10 or min(resized[1], target_w) < 10:
        raise MobiusError(f"image of {height}x{width}: the aspect ratio is too extreme")
    side = tile // patch
    mask = np.ones((side * rows, side * columns), np.float32)
    pad_h, pad_w = target_h - resized[0], target_w - resized[1]
    if pad_w >= patch:
        mask[:, mask.shape[1] - pad_w // patch :] = 0
    if pad_h >= patch:
        mask[mask.shape[0] - pad_h // patch :, :] = 0
    return (columns, rows), resized, mask


class Phi4MultimodalProcessor(ImageTextProcessor):
    """Phi4MultimodalProcessor's images and prompt (module docstring)."""

    image_defaults = dict(size={"height": 448, "width": 448})

    @property
    def image_token(self) -> str:
        return self.token_text("image_token", "<|endoftext10|>")

    @property
    def tile(self) -> int:
        size = self.image.size
        if size.get("height") != size.get("width") or not size.get("height"):
            raise MobiusError(f"Phi-4-multimodal's crops are square; size is {size}")
        return size["height"]

    def preprocess(self, image: np.ndarray):
        """``(crops [1 + n, 3, s, s] float32, mask [1 + n, m, m], size (h, w), tokens)`` of one
        ``[3, h, w]`` uint8 image: the global view first."""
        tile = self.tile
        patch = integer(self.image.raw, "patch_size", 14, 1, tile)
        max_crops = integer(self.image.raw, "dynamic_hd", 36, 1, 1 << 10)
        if tile % patch:
            raise MobiusError(f"crop size {tile} is not a multiple of patch_size {patch}")
        (columns, rows), resized, mask = hd_canvas(*image.shape[1:], tile, patch, max_crops)
        canvas = np.full((3, tile * rows, tile * columns), 255, np.uint8)
        canvas[:, : resized[0], : resized[1]] = resize_antialiased(image, resized)
        # transformers fuses rescale and normalise: (x - mean / factor) / (std / factor)
        factor = np.float32(1.0 / self.image.rescale_factor)
        mean = np.float32(self.image.image_mean) * factor
        std = np.float32(self.image.image_std) * factor
        pixels = (canvas.astype(np.float32) - mean[:, None, None]) / std[:, None, None]
        crops = pixels.reshape(3, rows, tile, columns, tile).transpose(1, 3, 0, 2, 4)
        glance = torch_bicubic(pixels, (tile, tile))
        crops = np.concatenate([glance[None], crops.reshape(-1, 3, tile, tile)])
        side = tile // patch
        tiles = (
            mask.reshape(rows, side, columns, side).transpose(0, 2, 1, 3).reshape(-1, side, side)
        )
        masks = np.concatenate([np.ones((1, side, side), np.float32), tiles])
        # the model's tokens: global view (rows ended), separator, real sub-grid (rows ended)
        base = side // 2 + side % 2
        real = tiles[:, ::2, ::2].reshape(rows, columns, base, base).transpose(0, 2, 1, 3)
        real = real.reshape(rows * base, columns * base)
        tokens = base * base + 1 + int(real.sum()) + int(real[:, 0].sum()) + base
        return crops, masks, (tile * rows, tile * columns), tokens

    @staticmethod
    def stack(done: list) -> dict[str, np.ndarray]:
        """The images' :meth:`preprocess` outputs as one batch, padded to the most crops
        (all-zero crops, all-real masks, as transformers pads them)."""
        most = max(len(d[0]) for d in done)
        pixels = np.zeros((len(done), most, *done[0][0].shape[1:]), np.float32)
        masks = np.ones((len(done), most, *done[0][1].shape[1:]), np.float32)
        for i, (crops, mask, _, _) in enumerate(done):
            pixels[i, : len(crops)], masks[i, : len(mask)] = crops, mask
        sizes = np.asarray([d[2] for d in done], np.int64)
        return dict(image_pixel_values=pixels, image_sizes=sizes, image_attention_mask=masks)

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        self.count_placeholders(text, images)
        done = [self.preprocess(image) for image in self.arrays(images)]
        inputs = self.tokenize(self.expand(text, [self.image_token * d[3] for d in done]))
        return dict(inputs, **self.stack(done)) if done else inputs
