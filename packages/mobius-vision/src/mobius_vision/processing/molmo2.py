"""Molmo2's images: a global view plus overlapping crops, cut into patches, pooled 2x2.

What ``Molmo2ImageProcessor`` and ``Molmo2Processor`` do, without torch:

- the image is resized (bilinear, no antialiasing, on floats, then rounded back to
  uint8, as torchvision does there) to a canvas of ``tiling_h x tiling_w`` windows plus
  the overlap margins, the tiling the smallest that needs the least downscaling within
  ``max_crops``; the canvas is cut into ``size``-square crops that overlap by the margins;
- a global view: the whole image resized to one crop;
- each crop's pixels normalised (mean and std scaled by 255, as the fused torch path
  computes) and cut into ``patch_size`` squares, channels last: ``pixel_values
  [crops, patches, patch * patch * 3]``, the global view first;
- ``image_token_pooling [tokens, pool_h * pool_w]``: the patches each image token pools
  (the global view's grid, then the canvas's without the margins crops share), ``-1``
  past the edges, counted over all the prompt's crops;
- ``mm_token_type_ids`` marks the image tokens (:data:`IMAGE_TOKENS`), ``image_grids`` and
  ``image_num_crops`` are as transformers returns them;
- each ``<|image|>`` becomes the global view's tokens then the crops' tokens, each a
  start marker, rows of ``<im_patch>`` each ended by ``<im_col>``, and ``<im_end>``;
  the prompt starts with the BOS (the EOS where there is none).
"""

from __future__ import annotations

import itertools

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import BILINEAR, image_size, integer

_MAX = 1 << 12
#: The tokens transformers' ``mm_token_type_ids`` marks as image tokens.
IMAGE_TOKENS = (
    "<im_patch>",
    "<im_col>",
    "<im_start>",
    "<low_res_im_start>",
    "<frame_start>",
    "<im_end>",
    "<frame_end>",
    "<im_low>",
)


def bilinear(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A ``[c, h, w]`` image resized as ``torch.nn.functional.interpolate(...,
    mode="bilinear", align_corners=False)`` does (no antialiasing, edges clamped).

    In float32, width first: of the orders measured, the closest to torch's CPU kernel,
    whose own rounding is not reproduced to the bit (after rounding to uint8, about one
    value in 20000 lands one step apart; float64 would miss one in 1000)."""
    image = image.astype(np.float32)
    for axis, out_size in ((2, size[1]), (1, size[0])):
        in_size = image.shape[axis]
        scale = np.float32(in_size / out_size)
        source = np.maximum((np.arange(out_size, dtype=np.float32) + 0.5) * scale - 0.5, 0)
        low = np.minimum(source.astype(np.int64), in_size - 1)
        high = np.minimum(low + 1, in_size - 1)
        shape = [1, 1, 1]
        shape[axis] = out_size
        weight = (source - low).astype(np.float32).reshape(shape)
        a, b = np.take(image, low, axis=axis), np.take(image, high, axis=axis)
        image = a * (1 - weight) + b * weight
    return image


def select_tiling(height: int, width: int, window: int, max_crops: int) -> tuple[int, int]:
    """``(rows, columns)`` of windows: the fewest that fit without shrinking, else the ones
    that shrink the least (``select_tiling`` of transformers)."""
    tilings = [(h, w) for h, w in itertools.product(range(1, max_crops + 1), repeat=2)]
    tilings = sorted(
        (t for t in tilings if t[0] * t[1] <= max_crops), key=lambda t: (t[0] * t[1], t[0])
    )
    scales = [min(h * window / height, w * window / width) for h, w in tilings]
    scales = np.asarray(scales, dtype=np.float32)
    if np.all(scales < 1):
        return tilings[int(scales.argmax())]
    return tilings[int(np.where(scales < 1, 1e10, scales).argmin())]


def pooling_windows(grid: np.ndarray, pool_h: int, pool_w: int) -> np.ndarray:
    """The ``[rows * cols, pool_h * pool_w]`` windows of an index ``grid``, padded with -1
    evenly (the extra row or column after)."""
    pad_h = -grid.shape[0] % pool_h
    pad_w = -grid.shape[1] % pool_w
    grid = np.pad(
        grid, ((pad_h // 2, (pad_h + 1) // 2), (pad_w // 2, (pad_w + 1) // 2)), constant_values=-1
    )
    rows, cols = grid.shape[0] // pool_h, grid.shape[1] // pool_w
    windows = grid.reshape(rows, pool_h, cols, pool_w).transpose(0, 2, 1, 3)
    return windows.reshape(rows * cols, pool_h * pool_w)


class Molmo2Processor(ImageTextProcessor):
    """Molmo2Processor over images (``<|image|>`` once per image)."""

    image_defaults = dict(size={"height": 378, "width": 378}, resample=BILINEAR)

    @property
    def image_token(self) -> str:
        return self.token_text("image_token", "<|image|>")

    def crop_settings(self) -> tuple[int, int, int, tuple[int, int], tuple[int, int]]:
        """``(crop size, patch size, max crops, overlap margins, pooling size)``, checked."""
        raw, size = self.image.raw, self.image.size
        crop = size.get("height")
        if crop is None or crop != size.get("width"):
            raise MobiusError(f"preprocessor setting size {size} is not a square crop")
        patch = integer(raw, "patch_size", 14, 1, _MAX)
        margins = raw.get("overlap_margins", [4, 4])
        pooling = raw.get("pooling_size", [2, 2])
        for name, pair in (("overlap_margins", margins), ("pooling_size", pooling)):
            if not (
                isinstance(pair, list)
                and len(pair) == 2
                and all(isinstance(v, int) and 0 <= v < _MAX for v in pair)
            ):
                raise MobiusError(f"preprocessor setting {name} {pair!r} is not two counts")
        if crop % patch or sum(margins) >= crop // patch or 0 in pooling:
            raise MobiusError(
                f"preprocessor settings: crops of {crop} pixels, patches of {patch} and "
                f"margins {margins} (pooling {pooling}) do not fit"
            )
        if self.image.resample != BILINEAR:
            raise MobiusError(
                f"Molmo2 images: only the bilinear resize is reproduced, not resample "
                f"{self.image.resample}"
            )
        return crop, patch, integer(raw, "max_crops", 8, 1, 64), tuple(margins), tuple(pooling)

    def resized(self, image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
        """``image`` (uint8) resized, rounded back to uint8 values, normalised: float32."""
        pixels = np.clip(np.round(bilinear(image, size)), 0, 255)
        mean = np.asarray(self.image.image_mean, np.float32)[:, None, None]
        std = np.asarray(self.image.image_std, np.float32)[:, None, None]
        scale = np.float32(1 / self.image.rescale_factor)
        return (pixels - mean * scale) / (std * scale)

    def crops(self, image: np.ndarray):
        """One ``[3, h, w]`` uint8 image's crops ``[n, 3, crop, crop]`` (global view first),
        its pooling windows (indices within its own patches) and its grid."""
        crop, patch, max_crops, (left, right), (pool_h, pool_w) = self.crop_settings()
        height, width = image_size(image)
        side = crop // patch  # patches a crop side
        window = (side - left - right) * patch
        margin = (left + right) * patch
        rows, cols = select_tiling(height - margin, width - margin, window, max_crops)
        canvas = self.resized(image, (rows * window + margin, cols * window + margin))
        views = [self.resized(image, (crop, crop))]
        for i, j in itertools.product(range(rows), range(cols)):
            views.append(canvas[:, i * window : i * window + crop, j * window : j * window + crop])
        index = np.arange(rows * cols * side * side).reshape(rows, cols, side, side)
        if left:  # the margins a crop shares with the one before it are read there
            index[1:, :, :left, :] = -1
            index[:, 1:, :, :left] = -1
        if right:
            index[:-1, :, -right:, :] = -1
            index[:, :-1, :, -right:] = -1
        index = index.transpose(0, 2, 1, 3).reshape(-1)
        index = index[index >= 0].reshape(canvas.shape[1] // patch, canvas.shape[2] // patch)
        high = pooling_windows(index, pool_h, pool_w)
        low = pooling_windows(np.arange(side * side).reshape(side, side), pool_h, pool_w)
        pooling = np.concatenate([low, np.where(high >= 0, high + side * side, -1)])
        grid = [-(-side // pool_h), -(-side // pool_w)]
        grid += [-(-index.shape[0] // pool_h), -(-index.shape[1] // pool_w)]
        return np.stack(views), pooling, grid

    def switch(self, name: str, default: bool) -> bool:
        """A yes/no setting of the HF processor (unset: ``default``)."""
        value = self.processor_setting(name, default)
        if not isinstance(value, bool):
            raise MobiusError(f"processor setting {name} {value!r} is not true or false")
        return value

    def image_text(self, grid: list[int]) -> str:
        """The tokens of one image of pooled ``grid`` (global view's rows and columns, then
        the crops')."""
        low_rows, low_cols, high_rows, high_cols = grid
        use_cols = self.switch("image_use_col_tokens", True)
        single_cols = self.switch("use_single_crop_col_tokens", use_cols)
        column = "<im_col>" if use_cols else ""
        high = "<im_start>" + ("<im_patch>" * high_cols + column) * high_rows + "<im_end>"
        single_start = self.switch("use_single_crop_start_token", True)
        start = "<low_res_im_start>" if single_start else "<im_start>"
        column = "<im_col>" if single_cols else ""
        low = start + ("<im_patch>" * low_cols + column) * low_rows + "<im_end>"
        return low + high

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        self.count_placeholders(text, images)
        _, patch, *_ = self.crop_settings()
        views, pooling, grids, expansions, offset = [], [], [], [], 0
        for image in self.arrays(images):
            crops, windows, grid = self.crops(image)
            n, channels, side, _ = crops.shape
            per_side = side // patch
            patches = crops.reshape(n, channels, per_side, patch, per_side, patch)
            patches = patches.transpose(0, 2, 4, 3, 5, 1)  # [n, rows, cols, py, px, channels]
            views.append(patches.reshape(n, per_side * per_side, patch * patch * channels))
            pooling.append(np.where(windows >= 0, windows + offset, -1))
            offset += n * per_side * per_side
            grids.append(grid)
            expansions.append(self.image_text(grid))
        bos = self.tokenizer.bos_token or self.tokenizer.eos_token or ""
        text = self.expand(text, expansions)
        inputs = self.tokenize(text if text.startswith(bos) else bos + text)
        marks = [self.tokenizer.convert_tokens_to_ids(t) for t in IMAGE_TOKENS]
        marks = [i for i in marks if i is not None and i != self.tokenizer.unk_token_id]
        inputs["mm_token_type_ids"] = np.isin(inputs["input_ids"], marks).astype(np.int64)
        if views:
            inputs["pixel_values"] = np.concatenate(views).astype(np.float32)
            inputs["image_token_pooling"] = np.concatenate(pooling).astype(np.int64)
            inputs["image_grids"] = np.asarray(grids, dtype=np.int64)
            inputs["image_num_crops"] = np.asarray([len(v) for v in views], dtype=np.int64)
        return inputs
