"""LLaVA-NeXT: LLaVA over AnyRes tiles, packed per image with a learned ``image_newline``.

The processor resizes each image into the grid of tiles that
``select_best_resolution`` picks from ``image_grid_pinpoints`` and puts a
downscaled whole image first (``pixel_values [num_images, num_patches, C, H, W]``,
zero tiles padding ``num_patches`` to the largest image; ``image_sizes`` int64
``[num_images, 2]`` as (height, width)). Every real tile goes through LLaVA's
tower and projector; per image the tiles are laid out as one feature map, cropped
back to the image's aspect ratio (``unpad_image``), given ``image_newline`` at the
end of each row, and put after the whole image's features.

The grid is chosen in the graph with transformers' own float64 arithmetic over the
constant pinpoint list; an ONNX ``Loop`` packs the images (each has its own grid
and crop). ``unpad_image``'s rounding is reproduced with integer division, exact
for image sides up to 10**7 pixels.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import scan_body
from mobius.errors import ConfigError
from mobius_vision.models.llava import LlavaConfig, LlavaForConditionalGeneration

INT64, DOUBLE = ir.DataType.INT64, ir.DataType.DOUBLE


@dataclass
class LlavaNextConfig(LlavaConfig):
    image_grid_pinpoints: tuple[tuple[int, int], ...] = ()

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        pinpoints = tuple((int(h), int(w)) for h, w in hf_config.image_grid_pinpoints)
        vision = fields["vision"]
        tile, width = vision.image_size
        if tile != width:
            raise ConfigError(f"AnyRes tiles are square; the tower's image_size is {tile}x{width}")
        if not pinpoints or any(h <= 0 or w <= 0 or h % tile or w % tile for h, w in pinpoints):
            raise ConfigError(
                f"image_grid_pinpoints {pinpoints} are not positive multiples of the tile size "
                f"{tile} (transformers' processor cannot tile them either)"
            )
        side = tile // vision.patch_size
        tokens = getattr(vision, "num_positions", side * side)  # CLIP's has a class token
        if fields["vision_feature_select_strategy"] == "default":
            tokens -= 1
        if tokens != side * side:
            raise ConfigError(
                f"vision_feature_select_strategy {fields['vision_feature_select_strategy']!r} "
                f"leaves {tokens} tokens per tile of {vision.model_type}, not the {side}x{side} "
                "grid the tiles are laid out in (transformers fails on it too): use 'default' "
                "for a tower with a class token, 'full' for one without"
            )
        return dict(fields, image_grid_pinpoints=pinpoints)


@contextlib.contextmanager
def value_scope(op, name: str) -> Iterator[None]:
    """Name the values made in the block under ``name`` (no parameters are made there).

    In the single form this code runs in an ``If`` branch, whose builder numbers its
    values from zero again: unscoped, they could reuse a name of the outer graph.
    """
    op.builder.push_module(name, "")
    try:
        yield
    finally:
        op.builder.pop_module()


def _constant(op, values, dtype=None):
    return op.Constant(value=ir.tensor(np.asarray(values, dtype=dtype)))


def best_resolution(op, image_sizes, pinpoints):
    """transformers' ``select_best_resolution`` per image: an index into ``pinpoints`` [num_images].

    The most effective resolution (``int(side * scale)`` in float64, as Python
    computes it), then the least wasted, then the first in the list.
    """
    heights = _constant(op, [[h for h, _ in pinpoints]], np.float64)  # [1, K]
    widths = _constant(op, [[w for _, w in pinpoints]], np.float64)
    sizes = op.Cast(image_sizes, to=DOUBLE)
    height, width = op.Slice(sizes, [0], [1], [1]), op.Slice(sizes, [1], [2], [1])  # [N, 1]
    scale = op.Min(op.Div(widths, width), op.Div(heights, height))  # [N, K]
    down_w = op.Cast(op.Floor(op.Mul(width, scale)), to=INT64)
    down_h = op.Cast(op.Floor(op.Mul(height, scale)), to=INT64)
    area = op.ReduceProd(image_sizes, [1], keepdims=1)  # [N, 1]
    effective = op.Min(op.Mul(down_w, down_h), area)
    areas = [h * w for h, w in pinpoints]
    most = max(areas)
    wasted = op.Sub(_constant(op, [areas], np.int64), effective)  # in [0, most]
    # (effective, -wasted) in lexicographic order; ArgMax keeps the first of equals.
    key = op.Add(
        op.Mul(effective, _constant(op, most + 1, np.int64)),
        op.Sub(_constant(op, most, np.int64), wasted),
    )
    return op.ArgMax(op.Cast(key, to=DOUBLE), axis=1, keepdims=0)  # exact below 2**53


def python_floordiv(op, x, y):
    """Python's float ``x // y`` for positive doubles, step by step as CPython computes it."""
    div = op.Div(op.Sub(x, op.Mod(x, y, fmod=1)), y)
    floor = op.Floor(div)
    return op.Add(
        floor, op.Cast(op.Greater(op.Sub(div, floor), _constant(op, 0.5, np.float64)), to=DOUBLE)
    )


def unpad(op, x, size, height, width):
    """transformers' ``unpad_image`` of ``x [D, height, width]`` to an image of ``size`` (h, w).

    The centred band that the processor's padding did not fill; sizes are int64 [1].
    """
    image_h, image_w = op.Slice(size, [0], [1], [0]), op.Slice(size, [1], [2], [0])
    wider = op.Greater(op.Mul(image_w, height), op.Mul(width, image_h))  # aspect ratios, exact
    pad_h = op.Div(op.Sub(height, op.Div(op.Mul(image_h, width), image_w)), 2)
    pad_w = op.Div(op.Sub(width, op.Div(op.Mul(image_w, height), image_h)), 2)
    zero = op.Constant(value_ints=[0])
    top, left = op.Where(wider, pad_h, zero), op.Where(wider, zero, pad_w)
    starts = op.Concat(top, left, axis=0)
    ends = op.Concat(op.Sub(height, top), op.Sub(width, left), axis=0)
    return op.Slice(x, starts, ends, [1, 2])


class LlavaNextForConditionalGeneration(LlavaForConditionalGeneration):
    """LLaVA with AnyRes tiles and ``image_newline`` (see the module docstring)."""

    config_class = LlavaNextConfig

    def __init__(self, config: LlavaNextConfig) -> None:
        super().__init__(config)
        self.image_newline = nn.Parameter([config.text.hidden_size])

    @property
    def side(self) -> int:
        """Patches along one side of a tile."""
        return self.config.vision.image_size[0] // self.config.vision.patch_size

    def vision_inputs(self, dtype) -> list[tuple]:
        height, width = self.config.vision.image_size
        channels = self.config.vision.num_channels
        shape = ["num_images", "num_patches", channels, height, width]
        return [("pixel_values", dtype, shape), ("image_sizes", INT64, ["num_images", 2])]

    renames = {"model.image_newline": "image_newline", **LlavaForConditionalGeneration.renames}

    @property
    def ignored(self) -> tuple[str, ...]:
        return (*super().ignored, "vision_tower.head.*")  # SigLIP's pooling head

    def tile_grids(self, op, image_sizes):
        """Tiles down and across per image (``get_anyres_image_grid_shape``), int64 [num_images]."""
        pinpoints = self.config.image_grid_pinpoints
        tile = self.config.vision.image_size[0]
        best = best_resolution(op, image_sizes, pinpoints)
        rows = op.Gather(_constant(op, [h // tile for h, _ in pinpoints], np.int64), best)
        cols = op.Gather(_constant(op, [w // tile for _, w in pinpoints], np.int64), best)
        return rows, cols

    def tile_counts(self, op, rows, cols, *extra):
        """Tiles per image, the whole image included (``image_size_to_num_patches``)."""
        return op.Add(op.Mul(rows, cols), op.Constant(value_int=1))

    def image_features(self, op, pixel_values, image_sizes, *extra):
        self.image_newline._realize(op.builder)  # noqa: SLF001  (root-level name, even in an If)
        with value_scope(op, "anyres_tiles"):
            rows, cols = self.tile_grids(op, image_sizes)
            counts = self.tile_counts(op, rows, cols, *extra)  # [num_images]
            slots = op.Range(
                _constant(op, 0, np.int64),
                op.Squeeze(op.Shape(pixel_values, start=1, end=2), [0]),
                _constant(op, 1, np.int64),
            )
            real = op.Less(op.Unsqueeze(slots, [0]), op.Unsqueeze(counts, [1]))  # [N, patches]
            index = op.Squeeze(op.NonZero(op.Reshape(real, [-1])), [0])  # zero tiles left out
            shape = op.Concat([-1], op.Shape(pixel_values, start=2), axis=0)
            tiles = op.Gather(op.Reshape(pixel_values, shape), index)  # [tiles, C, H, W]
        features = self.multi_modal_projector(op, self.select_features(op, tiles))
        with value_scope(op, "anyres_pack"):
            return self.pack_image_features(op, features, counts, rows, cols, image_sizes)

    def pack_image_features(self, op, features, counts, rows, cols, image_sizes):
        """Each image's tokens (``features [tiles, side*side, D]``), in order: ``[tokens, D]``."""
        dtype = features.dtype
        starts = op.Sub(op.CumSum(counts, op.Constant(value_int=0)), counts)

        def step(op, i, keep_going, packed):
            at = op.Unsqueeze(i, [0])
            start, count = op.Gather(starts, at), op.Gather(counts, at)  # [1]
            image = op.Slice(features, start, op.Add(start, count), [0])  # [count, tokens, D]
            size = op.Gather(image_sizes, i)  # [2]
            grid = op.Gather(rows, at), op.Gather(cols, at)
            tokens = self.image_tokens(op, image, count, grid, size)
            return op.Identity(keep_going), op.SequenceInsert(packed, tokens)

        body = scan_body(
            op,
            step,
            inputs=[
                ir.Value(name="i", type=ir.TensorType(INT64), shape=ir.Shape([])),
                ir.Value(name="keep_going", type=ir.TensorType(ir.DataType.BOOL)),
                ir.Value(name="packed", type=ir.SequenceType(ir.TensorType(dtype))),
            ],
            outputs=[
                ir.Value(name="keep_going_out", type=ir.TensorType(ir.DataType.BOOL)),
                ir.Value(name="packed_out", type=ir.SequenceType(ir.TensorType(dtype))),
            ],
            name="pack_image",
        )
        num_images = op.Squeeze(op.Shape(counts), [0])
        packed = op.Loop(
            num_images,
            op.Constant(value=ir.tensor(True)),
            op.SequenceEmpty(dtype=dtype),
            body=body,
        )
        return op.ConcatFromSequence(packed, axis=0)  # [image_tokens, D]

    def image_tokens(self, op, image, count, grid, size):
        """One image's tokens: the whole image's, then the tile grid's rows with newlines."""
        return op.Concat(op.Gather(image, 0), self.grid_tokens(op, image, grid, size), axis=0)

    def grid_tokens(self, op, image, grid, size):
        """The tiles as one map ``[D, rows, cols]``, unpadded, a newline per row: ``[tokens, D]``."""
        rows, cols = grid
        side = op.Constant(value_ints=[self.side])
        x = op.Slice(image, [1], [2**62], [0])  # [rows*cols, side*side, D]
        x = op.Reshape(x, op.Concat(rows, cols, side, side, [-1], axis=0))
        x = op.Transpose(x, perm=[4, 0, 2, 1, 3])  # [D, rows, side, cols, side]
        height, width = op.Mul(rows, side), op.Mul(cols, side)
        x = op.Reshape(x, op.Concat([0], height, width, axis=0))  # [D, height, width]
        x = self.fit_grid(op, unpad(op, x, size, height, width))
        shape = op.Concat(op.Shape(x, start=0, end=2), [1], axis=0)  # [D, rows', 1]
        newline = op.Expand(op.Reshape(self.image_newline, [-1, 1, 1]), shape)
        x = op.Concat(x, newline, axis=2)  # [D, rows', cols' + 1]
        return op.Transpose(op.Reshape(x, [0, -1]), perm=[1, 0])

    def fit_grid(self, op, x):
        """The unpadded map as it is (LLaVA-OneVision shrinks a large one)."""
        return x


MODEL_TYPES = {"llava_next": LlavaNextForConditionalGeneration}
