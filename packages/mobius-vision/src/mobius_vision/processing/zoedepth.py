"""The numpy pieces of ZoeDepth's image processor and post-processing (transformers' PIL
backend), which :class:`mobius_vision.depth_runner.ZoeDepthProcessor` puts together.

Pixels are reflect-padded by ``int(sqrt(side / 2) * 3)`` on each side (the model sees past
the borders) and resized with PyTorch's bilinear ``align_corners=True``; the depth is
resized (bicubic) to the padded image's size and the padding cropped off
(``post_process_depth_estimation`` with ``do_remove_padding``, what the depth pipeline
runs; it averages no flipped image).
"""

from __future__ import annotations

import numpy as np

from mobius_vision.processing.phi4_multimodal import torch_bicubic

#: ZoeDepth pads each side by ``int(sqrt(side / 2) * PADDING_FACTOR)`` pixels.
PADDING_FACTOR = 3


def border(side: int) -> int:
    """The reflect padding ZoeDepth adds on each end of a side of ``side`` pixels."""
    return int(np.sqrt(side / 2) * PADDING_FACTOR)


def constrain_to_multiple(value: float, multiple: float) -> int:
    """transformers' ZoeDepth ``constrain_to_multiple_of``: rounded (halves to even) to a
    multiple, then truncated to an int (``multiple`` may be a fraction: its default 1/32)."""
    return int(np.round(value / multiple) * multiple)


def bilinear_align_corners(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A float32 ``[c, h, w]`` image resized as ``F.interpolate(mode="bilinear",
    align_corners=True)`` does (weights in float32, as PyTorch's CPU kernel)."""
    for axis, out in ((2, size[1]), (1, size[0])):
        side = image.shape[axis]
        scale = np.float32((side - 1) / (out - 1)) if out > 1 else np.float32(0)
        source = scale * np.arange(out, dtype=np.float32)
        low = np.minimum(np.floor(source).astype(np.int64), side - 1)
        high = np.minimum(low + 1, side - 1)
        weight = (source - low.astype(np.float32)).astype(np.float32)
        shape = [1, 1, 1]
        shape[axis] = out
        weight = weight.reshape(shape)
        first, second = np.take(image, low, axis=axis), np.take(image, high, axis=axis)
        image = (np.float32(1) - weight) * first + weight * second
    return image.astype(np.float32, copy=False)


def reflect_pad(pixels: np.ndarray) -> np.ndarray:
    """``[c, h, w]`` pixels reflect-padded by :func:`border` of each side."""
    height, width = pixels.shape[1:]
    return np.pad(pixels, ((0, 0), (border(height),) * 2, (border(width),) * 2), mode="reflect")


def remove_padding(depth: np.ndarray, size: tuple[int, int], padded: bool) -> np.ndarray:
    """The model's ``[h', w']`` depth at the image's ``(height, width)``: resized to the padded
    size (PyTorch's bicubic) and, when the pixels were ``padded``, the borders cropped off."""
    height, width = size
    pad_h, pad_w = (border(height), border(width)) if padded else (0, 0)
    depth = torch_bicubic(depth[None], (height + 2 * pad_h, width + 2 * pad_w))[0]
    return depth[pad_h : pad_h + height, pad_w : pad_w + width]
