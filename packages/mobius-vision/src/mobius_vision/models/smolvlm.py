"""SmolVLM: Idefics3's architecture (tower, pixel-shuffle connector, text decoder) and inputs.

The one difference transformers makes: when every tile of the batch is all zeros,
SmolVLM still runs the tower on the first one instead of none.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from mobius_vision.models.idefics3 import Idefics3Config, Idefics3ForConditionalGeneration


@dataclass
class SmolVLMConfig(Idefics3Config):
    pass


class SmolVLMForConditionalGeneration(Idefics3ForConditionalGeneration):
    config_class = SmolVLMConfig

    def real_tiles(self, op, pixel_values):
        """Idefics3's real tiles; the first tile too when there are none."""
        real = super().real_tiles(op, pixel_values)
        any_real = op.ReduceMax(op.Cast(real, to=ir.DataType.INT64), keepdims=0)
        none_real = op.Equal(any_real, op.Constant(value=ir.tensor(np.array(0, np.int64))))
        zero, one = op.Constant(value_int=0), op.Constant(value_int=1)
        index = op.Range(zero, op.Squeeze(op.Shape(real), [0]), one)  # [tiles]
        first = op.Equal(index, zero)
        return op.Or(real, op.And(first, none_real))


MODEL_TYPES = {"smolvlm": SmolVLMForConditionalGeneration}
