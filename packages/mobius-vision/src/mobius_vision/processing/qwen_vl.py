"""Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3.5 images: flattened patches and M-RoPE positions.

What ``Qwen2VLImageProcessor`` (its PIL backend) and the Qwen-VL processors do, without
torch. Each image is resized to multiples of ``patch_size * merge_size`` whose area lies
within ``[min_pixels, max_pixels]`` (:func:`smart_resize`), rescaled and normalised,
then cut into ``patch_size`` squares ordered merge block by merge block, each patch
repeated ``temporal_patch_size`` times (a still image is a clip of identical frames):
``pixel_values`` ``[patches, 3 * temporal * patch * patch]``, ``image_grid_thw`` ``[1,
rows, columns]`` per image. The prompt's ``<|image_pad|>`` becomes one token per merge
block. :meth:`QwenVLProcessor.rope_positions` is the model's ``get_rope_index``: text
counts on all three streams, an image's tokens take (start, start + row, start +
column), and the text after it resumes past the larger side.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import BICUBIC, ImageSettings, integer, resize
from mobius_vision.processing._settings import load_tokenizer, read_settings

OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
#: Pixel-count bounds are not sizes: read here, not by ImageSettings (they pass 2**16).
PIXEL_BOUNDS = ("size", "min_pixels", "max_pixels")
#: The longest side over the shortest that smart_resize accepts (transformers' limit).
MAX_ASPECT_RATIO = 200


def smart_resize(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """The ``(height, width)`` an image is resized to: both multiples of ``factor``, the
    area within ``[min_pixels, max_pixels]``, the aspect ratio kept as closely as that allows."""
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise MobiusError(
            f"an image of {height}x{width} pixels is too elongated for Qwen-VL "
            f"(the longer side may be at most {MAX_ASPECT_RATIO} times the shorter)"
        )
    new_height = round(height / factor) * factor
    new_width = round(width / factor) * factor
    if new_height * new_width > max_pixels:
        scale = math.sqrt(height * width / max_pixels)
        new_height = max(factor, math.floor(height / scale / factor) * factor)
        new_width = max(factor, math.floor(width / scale / factor) * factor)
    elif new_height * new_width < min_pixels:
        scale = math.sqrt(min_pixels / (height * width))
        new_height = math.ceil(height * scale / factor) * factor
        new_width = math.ceil(width * scale / factor) * factor
    return new_height, new_width


def flatten_patches(pixels: np.ndarray, patch: int, merge: int, temporal: int) -> np.ndarray:
    """``pixels`` ``[c, h, w]`` (multiples of ``patch * merge``) as rows of one patch each,
    ``[(h / patch) * (w / patch), c * temporal * patch * patch]``: merge blocks in row order,
    the patches of a block in row order, each patch's channels repeated over time."""
    channels, height, width = pixels.shape
    rows, columns = height // patch, width // patch
    blocks = pixels.reshape(
        channels, rows // merge, merge, patch, columns // merge, merge, patch
    ).transpose(1, 4, 2, 5, 0, 3, 6)  # block row, block column, row in block, column in block
    frames = np.broadcast_to(
        blocks[:, :, :, :, :, None], (*blocks.shape[:5], temporal, patch, patch)
    )
    return frames.reshape(rows * columns, channels * temporal * patch * patch)


def mrope_positions(
    mm_token_type_ids: np.ndarray,
    attention_mask: np.ndarray,
    image_grid_thw: np.ndarray | None,
    spatial_merge_size: int,
) -> tuple[np.ndarray, np.ndarray]:
    """M-RoPE positions ``[3, batch, sequence]`` and deltas ``[batch, 1]`` of a batch whose
    image tokens are marked 1 in ``mm_token_type_ids``, as Qwen-VL's ``get_rope_index``
    computes them for images (padding positions stay 0).

    Each run of image tokens takes the next grid of ``image_grid_thw``; decode steps
    then feed ``text position + delta`` on all three streams.
    """
    batch, length = mm_token_type_ids.shape
    positions = np.zeros((3, batch, length), dtype=np.int64)
    deltas = np.zeros((batch, 1), dtype=np.int64)
    grids = iter([] if image_grid_thw is None else image_grid_thw.tolist())
    for row in range(batch):
        real = attention_mask[row].astype(bool)
        types = mm_token_type_ids[row][real].tolist()
        pieces, start = [], 0
        for kind, run in itertools.groupby(types):
            count = len(list(run))
            if kind == 0:
                pieces.append(np.broadcast_to(np.arange(count) + start, (3, count)))
                start += count
                continue
            try:
                frames, grid_h, grid_w = next(grids)
            except StopIteration:
                raise MobiusError("the prompt holds more images than image_grid_thw") from None
            height, width = grid_h // spatial_merge_size, grid_w // spatial_merge_size
            t, h, w = np.meshgrid(
                np.arange(frames), np.arange(height), np.arange(width), indexing="ij"
            )
            pieces.append(np.stack([t, h, w]).reshape(3, -1) + start)
            start += max(grid_h, grid_w) // spatial_merge_size
        if pieces:
            row_positions = np.concatenate(pieces, axis=1)
            positions[:, row, real] = row_positions
            deltas[row, 0] = row_positions.max() + 1 - len(types)
    return positions, deltas


class QwenVLProcessor(ImageTextProcessor):
    """Qwen2VLProcessor, Qwen2_5_VLProcessor and Qwen3VLProcessor (Qwen3.5's too) over images:
    they differ in nothing an image goes through."""

    image_defaults = dict(
        resample=BICUBIC,
        image_mean=OPENAI_CLIP_MEAN,
        image_std=OPENAI_CLIP_STD,
    )
    #: Qwen2VLImageProcessor's defaults.
    default_patch_size, default_merge_size, default_temporal_patch_size = 14, 2, 2
    default_min_pixels, default_max_pixels = 56 * 56, 28 * 28 * 1280
    #: The placeholder and the markers around it, where the tokenizer names none.
    default_image_token = "<|image_pad|>"
    default_vision_start, default_vision_end = "<|vision_start|>", "<|vision_end|>"

    @classmethod
    def from_package(cls, package_dir: str | Path, tokenizer=None):
        """The processor of the package at ``package_dir`` (``tokenizer``: already loaded)."""
        settings = read_settings(package_dir)
        standard = {k: v for k, v in settings.image.items() if k not in PIXEL_BOUNDS}
        image = ImageSettings.from_dict(standard, **cls.image_defaults)
        return cls(tokenizer or load_tokenizer(package_dir), image, settings)

    @property
    def image_token(self) -> str:
        return self.token_text("image_token", self.default_image_token)

    @property
    def image_token_id(self) -> int:
        named = getattr(self.tokenizer, "image_token_id", None)
        return int(named) if isinstance(named, int) and named else self.token_id(self.image_token)

    def with_placeholders(self, prompt: str, count: int) -> str:
        """``prompt`` after one ``<|vision_start|><|image_pad|><|vision_end|>`` per image, as
        Qwen's chat template writes them, when it holds no placeholder."""
        if count == 0 or self.image_token in prompt:
            return prompt
        start = self.token_text("vision_start_token", self.default_vision_start)
        end = self.token_text("vision_end_token", self.default_vision_end)
        return f"{start}{self.image_token}{end}" * count + prompt

    def _image_int(self, name: str, default: int, high: int = 1 << 12) -> int:
        return integer(self.settings.image, name, default, 1, high)

    @property
    def patch_size(self) -> int:
        return self._image_int("patch_size", self.default_patch_size)

    @property
    def merge_size(self) -> int:
        return self._image_int("merge_size", self.default_merge_size, 64)

    @property
    def temporal_patch_size(self) -> int:
        return self._image_int("temporal_patch_size", self.default_temporal_patch_size, 64)

    @property
    def pixel_bounds(self) -> tuple[int, int]:
        """``(min_pixels, max_pixels)``: ``min_pixels``/``max_pixels`` where the settings
        have them (older checkpoints), else ``size``'s ``shortest_edge``/``longest_edge``."""
        size = self.settings.image.get("size")
        size = size if isinstance(size, dict) else {}
        bounds = []
        for key, edge, default in (
            ("min_pixels", "shortest_edge", self.default_min_pixels),
            ("max_pixels", "longest_edge", self.default_max_pixels),
        ):
            fallback = integer(size, edge, default, 1, 1 << 40)
            bounds.append(integer(self.settings.image, key, fallback, 1, 1 << 40))
        if bounds[0] > bounds[1]:
            raise MobiusError(f"preprocessor min_pixels {bounds[0]} exceeds max_pixels {bounds[1]}")
        return bounds[0], bounds[1]

    def resized_size(self, height: int, width: int) -> tuple[int, int]:
        """The ``(height, width)`` an image of this size is resized to."""
        return smart_resize(height, width, self.patch_size * self.merge_size, *self.pixel_bounds)

    def patches(self, image: np.ndarray) -> tuple[np.ndarray, list[int]]:
        """One ``[3, h, w]`` uint8 image as flattened patches, and its ``[t, rows, columns]``."""
        patch, merge = self.patch_size, self.merge_size
        if self.image.do_resize:
            image = resize(image, self.resized_size(*image.shape[-2:]), self.image.resample)
        height, width = image.shape[-2:]
        if height % (patch * merge) or width % (patch * merge):
            raise MobiusError(
                f"an image of {height}x{width} pixels is not made of {patch * merge}-pixel "
                "merge blocks (turn do_resize on)"
            )
        pixels = self.image.finish(image)
        rows = flatten_patches(pixels, patch, merge, self.temporal_patch_size)
        return rows, [1, height // patch, width // patch]

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        self.count_placeholders(text, images)
        patches, grids = [], []
        for image in self.arrays(images):
            rows, grid = self.patches(image)
            patches.append(rows)
            grids.append(grid)
        per_block = self.merge_size**2
        text = self.expand(text, [self.image_token * (math.prod(g) // per_block) for g in grids])
        inputs = self.tokenize(text)
        inputs["mm_token_type_ids"] = (inputs["input_ids"] == self.image_token_id).astype(np.int64)
        if patches:
            inputs["pixel_values"] = np.concatenate(patches).astype(np.float32, copy=False)
            inputs["image_grid_thw"] = np.asarray(grids, dtype=np.int64)
        return inputs

    def rope_positions(self, inputs: dict[str, np.ndarray]):
        """The model's ``get_rope_index`` for ``inputs``: ``(positions [3, 1, seq], deltas [1, 1])``."""
        name = "spatial_merge_size"
        configured = {name: self.config_value(name, section="vision_config")}
        merge = integer(configured, name, self.merge_size, 1, 64)
        types = inputs.get("mm_token_type_ids")
        if types is None:
            types = (inputs["input_ids"] == self.image_token_id).astype(np.int64)
        mask = inputs.get("attention_mask")
        mask = np.ones_like(inputs["input_ids"]) if mask is None else mask
        return mrope_positions(types, mask, inputs.get("image_grid_thw"), merge)
