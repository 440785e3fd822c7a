"""ConvNeXt V2: ConvNeXt with Global Response Normalization after the first MLP projection
and no layer scale.

Checkpoint keys are ConvNeXt's under ``convnextv2.``, plus ``...layers.0.grn.weight`` /
``grn.bias`` (``[1, 1, 1, 4 * C]``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius_vision.models.convnext import (
    ConvNextConfig,
    ConvNextEncoder,
    ConvNextForImageClassification,
    ConvNextLayer,
    ConvNextModel,
    ConvNextStage,
)


@dataclass
class ConvNextV2Config(ConvNextConfig):
    layer_scale_init_value: float = 0.0

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        return dict(super().hf_fields(hf_config), layer_scale_init_value=0.0)


class ConvNextV2GRN(nn.Module):
    """``x + bias + weight * x * n`` with ``n`` the spatial L2 norm over its channel mean."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([1, 1, 1, dim])
        self.bias = nn.Parameter([1, 1, 1, dim])

    def forward(self, op, x):  # [batch, h, w, C]
        norm = op.ReduceL2(x, op.Constant(value_ints=[1, 2]), keepdims=1)
        mean = op.ReduceMean(norm, op.Constant(value_ints=[-1]), keepdims=1)
        scaled = op.Div(norm, op.Add(mean, op.CastLike(1e-6, x)))
        return op.Add(op.Add(op.Mul(self.weight, op.Mul(x, scaled)), self.bias), x)


class ConvNextV2Layer(ConvNextLayer):
    def __init__(self, config: ConvNextV2Config, dim: int) -> None:
        super().__init__(config, dim)
        self.grn = ConvNextV2GRN(4 * dim)

    def mlp(self, op, x):
        return self.pwconv2(op, self.grn(op, self.act(op, self.pwconv1(op, x))))


class ConvNextV2Stage(ConvNextStage):
    layer_class = ConvNextV2Layer


class ConvNextV2Encoder(ConvNextEncoder):
    stage_class = ConvNextV2Stage


class ConvNextV2Model(ConvNextModel):
    encoder_class = ConvNextV2Encoder


class ConvNextV2ForImageClassification(ConvNextForImageClassification):
    config_class = ConvNextV2Config
    model_class = ConvNextV2Model
    base_model_prefix = "convnextv2"


MODEL_TYPES = {"convnextv2": ConvNextV2ForImageClassification}
