"""DINOv2 with registers: DINOv2 plus ``num_register_tokens`` learned tokens after the class token.

Positions are added to ``[cls, patches]`` before the registers go in, so the
sequence is ``[cls, registers, patches]``; the classifier's patch mean skips the
registers. Keys as DINOv2's under ``dinov2_with_registers.``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius_vision.models.dinov2 import Dinov2Config, Dinov2ForImageClassification, Dinov2Model
from mobius_vision.models.vit import ViTEmbeddings


@dataclass
class Dinov2WithRegistersConfig(Dinov2Config):
    num_register_tokens: int = 4

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        registers = int(hf_config.num_register_tokens)
        return dict(super().hf_fields(hf_config), num_register_tokens=registers)


class Dinov2WithRegistersEmbeddings(ViTEmbeddings):
    """``[cls + pos[0], registers, patches + pos[1:]]``."""

    def __init__(self, config: Dinov2WithRegistersConfig) -> None:
        super().__init__(config)
        self.register_tokens = nn.Parameter([1, config.num_register_tokens, config.hidden_size])
        self.extra_tokens = 1 + config.num_register_tokens

    def forward(self, op, pixel_values):
        x = super().forward(op, pixel_values)  # [batch, 1 + patches, hidden]
        batch = op.Shape(pixel_values, start=0, end=1)
        shape = op.Concat(batch, op.Constant(value_ints=[1, 1]), axis=0)
        registers = op.Expand(self.register_tokens, shape)  # [batch, registers, hidden]
        cls = op.Slice(x, [0], [1], [1])
        patches = op.Slice(x, [1], [2**62], [1])
        return op.Concat(cls, registers, patches, axis=1)


class Dinov2WithRegistersModel(Dinov2Model):
    embeddings_class = Dinov2WithRegistersEmbeddings


class Dinov2WithRegistersForImageClassification(Dinov2ForImageClassification):
    config_class = Dinov2WithRegistersConfig
    base_model_prefix = "dinov2_with_registers"
    model_class = Dinov2WithRegistersModel
    backbone_class = (
        None  # its backbone (registers between the class token and patches) is not built
    )


MODEL_TYPES = {"dinov2_with_registers": Dinov2WithRegistersForImageClassification}
