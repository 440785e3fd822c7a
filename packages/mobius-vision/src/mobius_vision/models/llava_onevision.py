"""LLaVA-OneVision: LLaVA-NeXT's AnyRes packing, with a large tile map shrunk and multi-image
prompts left untiled.

After ``unpad_image``, a map of more than ``max_num_patches`` tiles' worth of
features (``vision_aspect_ratio`` ``"anyres_max_<N>"``, by a ratio over 1.1) is
resized bilinearly to ``int(side // ratio)``, with the float64 arithmetic of
transformers (``math.sqrt`` and Python's float ``//``) reproduced op by op. The
processor also returns ``batch_num_images`` (images per prompt): the images of a
prompt with several are one padded square each, their features the whole image's
and one ``image_newline``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir

from mobius.components import scan_body
from mobius.errors import ConfigError
from mobius_vision.models.llava_next import (
    DOUBLE,
    INT64,
    LlavaNextConfig,
    LlavaNextForConditionalGeneration,
    _constant,
    python_floordiv,
)


@dataclass
class LlavaOnevisionConfig(LlavaNextConfig):
    max_num_patches: int = 9

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        aspect = hf_config.vision_aspect_ratio
        try:
            max_num_patches = int(aspect.strip("anyres_max_"))  # noqa: B005 (as transformers reads it)
        except ValueError:
            raise ConfigError(f"vision_aspect_ratio {aspect!r} is not 'anyres_max_<N>'") from None
        return dict(super().hf_fields(hf_config), max_num_patches=max_num_patches)


def _branch(op, trace, dtype, name):
    out = ir.Value(name=f"{name}_out", type=ir.TensorType(dtype))
    return scan_body(op, trace, inputs=[], outputs=[out], name=name)


class LlavaOnevisionForConditionalGeneration(LlavaNextForConditionalGeneration):
    """LLaVA-NeXT with OneVision's shrinking and untiled multi-image prompts."""

    config_class = LlavaOnevisionConfig

    def vision_inputs(self, dtype) -> list[tuple]:
        return [*super().vision_inputs(dtype), ("batch_num_images", INT64, ["num_prompts"])]

    def tile_counts(self, op, rows, cols, batch_num_images):
        """``rows * cols + 1`` for an image alone in its prompt, else 1 (the whole image)."""
        images = op.Range(
            _constant(op, 0, np.int64), op.Squeeze(op.Shape(rows), [0]), _constant(op, 1, np.int64)
        )
        ends = op.CumSum(batch_num_images, op.Constant(value_int=0))  # [prompts]
        # The prompt of each image: how many prompts end at or before it.
        before = op.LessOrEqual(op.Unsqueeze(ends, [0]), op.Unsqueeze(images, [1]))
        prompt = op.ReduceSum(op.Cast(before, to=INT64), [1], keepdims=0)  # [num_images]
        alone = op.Equal(op.Gather(batch_num_images, prompt), op.Constant(value_int=1))
        tiled = super().tile_counts(op, rows, cols)
        return op.Where(alone, tiled, op.Constant(value_int=1))

    def image_tokens(self, op, image, count, grid, size):
        base = op.Gather(image, 0)  # [side*side, D]
        dtype = image.dtype

        def tiled(op):
            return op.Concat(base, self.grid_tokens(op, image, grid, size), axis=0)

        def alone(op):
            return op.Concat(base, op.Unsqueeze(self.image_newline, [0]), axis=0)

        return op.If(
            op.Squeeze(op.Greater(count, op.Constant(value_ints=[1])), [0]),
            then_branch=_branch(op, tiled, dtype, "tiled"),
            else_branch=_branch(op, alone, dtype, "untiled"),
        )

    def fit_grid(self, op, x):
        """``x [D, rows, cols]``, resized bilinearly when it holds too many tiles' features."""
        shape = op.Cast(op.Shape(x, start=1, end=3), to=DOUBLE)  # [2]
        budget = self.config.max_num_patches * self.side**2
        area = op.ReduceProd(shape, keepdims=1)
        ratio = op.Sqrt(op.Div(area, _constant(op, [budget], np.float64)))  # [1]
        size = op.Cast(python_floordiv(op, shape, ratio), to=INT64)
        dtype = x.dtype

        def shrink(op):
            sizes = op.Concat([1], op.Shape(x, start=0, end=1), size, axis=0)
            y = op.Resize(
                op.Unsqueeze(x, [0]),
                None,
                None,
                sizes,
                mode="linear",
                coordinate_transformation_mode="half_pixel",
            )  # F.interpolate(mode="bilinear", align_corners=False)
            return op.Squeeze(y, [0])

        return op.If(
            op.Squeeze(op.Greater(ratio, _constant(op, [1.1], np.float64)), [0]),
            then_branch=_branch(op, shrink, dtype, "shrink"),
            else_branch=_branch(op, lambda op: op.Identity(x), dtype, "keep"),
        )


MODEL_TYPES = {"llava_onevision": LlavaOnevisionForConditionalGeneration}
