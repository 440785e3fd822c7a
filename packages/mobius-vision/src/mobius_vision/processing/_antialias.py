"""torchvision's antialiased bilinear resize of uint8 images, in numpy.

Image processors that exist only as torchvision classes (Llama 4's) resize uint8 tensors
with ``antialias=True``. PyTorch does that in fixed point, as Pillow does, but with
int16 weights at a precision chosen per resize (the most bits that keep the largest
weight under 2**15) where Pillow keeps 22 bits: about one pixel in ten differs by one
grey level from PIL's resize. This is PyTorch's arithmetic: triangle weights over the
antialiasing support, normalised, rounded half away from zero to int16; a horizontal
pass, rounded to uint8, then a vertical one.
"""

from __future__ import annotations

import numpy as np


def _int16_weights(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray, int]:
    """``(first [out], weights [out, taps] int64, precision)`` of one axis's resize."""
    scale = in_size / out_size
    support = scale if scale >= 1.0 else 1.0  # bilinear's support (1) widened when shrinking
    inverse = 1.0 / scale if scale >= 1.0 else 1.0
    firsts, rows = [], []
    for i in range(out_size):
        center = scale * (i + 0.5)
        first = max(int(center - support + 0.5), 0)
        count = min(int(center + support + 0.5), in_size) - first
        taps = (np.arange(count) + first - center + 0.5) * inverse
        weights = np.maximum(1.0 - np.abs(taps), 0.0)
        total = weights.sum()
        firsts.append(first)
        rows.append(weights / total if total != 0.0 else weights)
    width = max(len(r) for r in rows)
    table = np.zeros((out_size, width))
    for i, r in enumerate(rows):
        table[i, : len(r)] = r
    largest = table.max()
    precision = 0
    while precision < 22 and int(0.5 + largest * (1 << (precision + 1))) < (1 << 15):
        precision += 1
    scaled = table * (1 << precision)
    fixed = np.where(scaled < 0, np.trunc(scaled - 0.5), np.trunc(scaled + 0.5)).astype(np.int64)
    return np.asarray(firsts), fixed, precision


def _resize_axis(image: np.ndarray, out_size: int, axis: int) -> np.ndarray:
    """One pass along ``axis`` of a uint8 ``[c, h, w]`` image."""
    in_size = image.shape[axis]
    firsts, weights, precision = _int16_weights(in_size, out_size)
    taps = weights.shape[1]
    index = np.minimum(firsts[:, None] + np.arange(taps), in_size - 1)  # zero weight past the end
    gathered = np.take(image.astype(np.int64), index, axis=axis)  # axis -> (out, taps)
    shape = [1] * gathered.ndim
    shape[axis], shape[axis + 1] = out_size, taps
    total = (gathered * weights.reshape(shape)).sum(axis=axis + 1) + (1 << (precision - 1))
    return np.clip(total >> precision, 0, 255).astype(np.uint8)


def resize_antialiased(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A uint8 ``[c, h, w]`` image resized to ``size`` ``(height, width)`` as torchvision's
    ``resize(..., BILINEAR, antialias=True)`` resizes a uint8 tensor."""
    height, width = size
    if image.shape[2] != width:
        image = _resize_axis(image, width, 2)
    if image.shape[1] != height:
        image = _resize_axis(image, height, 1)
    return image
