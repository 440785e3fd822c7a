"""Pix2Struct's image processing without torch: per-image normalisation, then padded patches.

transformers' processor (``Pix2StructImageProcessorPil``) normalises the whole image by
its own mean and standard deviation, resizes it (bilinear, antialiased, on floats, as
``torch.nn.functional.interpolate`` does) to the largest grid of ``patch_size``
patches that holds at most ``max_patches``, and lists the patches row by row, each
``(row + 1, column + 1, values in (y, x, channel) order)``, padded with zero rows to
``max_patches``; the mask marks the non-zero rows. VQA checkpoints (``is_vqa``) render a
header text onto the image with a font fetched from the hub: refused here.
"""

from __future__ import annotations

import math

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._image import flag, integer, size_setting


def _float_weights(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(first [out], weights [out, taps])`` of one axis's antialiased bilinear resize:
    triangle weights over the support (widened by the scale when shrinking), normalised.

    PyTorch computes them in float32 (the scale, each centre, each weight and their sum);
    so does this, since float64 centres move non-integer upscales by up to 3e-5.
    """
    f32 = np.float32
    scale = f32(in_size) / f32(out_size)
    support = scale if scale >= 1.0 else f32(1.0)
    inverse = f32(1.0) / scale if scale >= 1.0 else f32(1.0)
    firsts, rows = [], []
    for i in range(out_size):
        center = f32(float(scale) * (i + 0.5))
        first = max(int(center - support + f32(0.5)), 0)
        count = min(int(center + support + f32(0.5)), in_size) - first
        taps = ((np.arange(count) + first) - np.float64(center) + 0.5) * np.float64(inverse)
        weights = np.maximum(f32(1.0) - np.abs(taps.astype(f32)), f32(0.0))
        total = f32(0.0)
        for w in weights:  # summed in order, in float32
            total = f32(total + w)
        firsts.append(first)
        rows.append(weights / total if total != 0.0 else weights)
    table = np.zeros((out_size, max(len(r) for r in rows)), f32)
    for i, r in enumerate(rows):
        table[i, : len(r)] = r
    return np.asarray(firsts), table


def _resize_axis(image: np.ndarray, out_size: int, axis: int) -> np.ndarray:
    in_size = image.shape[axis]
    firsts, weights = _float_weights(in_size, out_size)
    index = np.minimum(firsts[:, None] + np.arange(weights.shape[1]), in_size - 1)
    gathered = np.take(image, index, axis=axis)  # axis -> (out, taps)
    shape = [1] * gathered.ndim
    shape[axis], shape[axis + 1] = out_size, weights.shape[1]
    return (gathered * weights.reshape(shape)).sum(axis=axis + 1).astype(np.float32)


def resize_float_antialiased(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A float ``[c, h, w]`` image resized to ``(height, width)`` as ``interpolate(...,
    mode="bilinear", align_corners=False, antialias=True)`` resizes it (width first)."""
    height, width = size
    if image.shape[2] != width:
        image = _resize_axis(image, width, 2)
    if image.shape[1] != height:
        image = _resize_axis(image, height, 1)
    return image


class Pix2StructPatches:
    """``preprocessor_config.json``'s settings → ``(flattened_patches, attention_mask)``."""

    def __init__(self, settings: dict) -> None:
        if flag(settings, "is_vqa", False):
            raise MobiusError(
                "a Pix2Struct VQA package renders the question onto the image with a font "
                "mobius does not ship: not supported"
            )
        self.normalize = flag(settings, "do_normalize", True)
        self.max_patches = integer(settings, "max_patches", 2048, 1)
        patch = size_setting(settings.get("patch_size", {"height": 16, "width": 16}), "patch_size")
        if "height" not in patch or "width" not in patch:
            raise MobiusError(f"patch_size needs height and width: {patch}")
        self.patch = patch["height"], patch["width"]

    def __call__(self, image: np.ndarray) -> dict[str, np.ndarray]:
        """One ``[3, h, w]`` uint8 image → ``flattened_patches`` [1, max_patches, 2 + values]
        float32 and ``attention_mask`` [1, max_patches] int64."""
        x = image.astype(np.float32)
        if self.normalize:
            std = max(float(np.std(x)), 1.0 / math.sqrt(x.size))
            x = (x - np.mean(x)) / np.float32(std)
        (ph, pw), limit = self.patch, self.max_patches
        channels, height, width = x.shape
        scale = math.sqrt(limit * (ph / height) * (pw / width))
        rows = max(min(int(scale * height / ph), limit), 1)
        columns = max(min(int(scale * width / pw), limit), 1)
        x = resize_float_antialiased(x.astype(np.float32), (rows * ph, columns * pw))
        grid = x.reshape(channels, rows, ph, columns, pw).transpose(1, 3, 2, 4, 0)
        values = grid.reshape(rows * columns, ph * pw * channels)
        ids = np.stack(np.meshgrid(np.arange(rows), np.arange(columns), indexing="ij"), -1)
        ids = ids.reshape(rows * columns, 2).astype(np.float32) + 1
        patches = np.zeros((limit, 2 + values.shape[1]), np.float32)
        patches[: rows * columns] = np.concatenate([ids, values], axis=1)
        mask = (patches.sum(axis=-1) != 0).astype(np.int64)
        return {"flattened_patches": patches[None], "attention_mask": mask[None]}
