"""Swin V2: Swin with cosine window attention (a clamped per-head logit scale), a
continuous position bias from a small MLP over log-spaced coordinates, post-norm blocks,
and patch merging that normalises after the reduction.

Checkpoint keys are Swin's under ``swinv2.``, with ``attention.self.logit_scale`` and
``attention.self.continuous_position_bias_mlp.{0,2}`` instead of the bias table (and no
key bias). As transformers does, each stage's window is set from its floor-divided size
(the height alone), and the shift mask is added to the scores twice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnxscript import nn

from mobius.components import LayerNorm, Linear, bidirectional_attention
from mobius.errors import ConfigError
from mobius_vision.models._conv import Activation, Sequential
from mobius_vision.models.swin import (
    SwinAttention,
    SwinConfig,
    SwinEncoder,
    SwinForImageClassification,
    SwinLayer,
    SwinModel,
    SwinPatchMerging,
    SwinSelfAttention,
    SwinStage,
    constant,
)


@dataclass
class Swinv2Config(SwinConfig):
    #: Per stage, the ``(height, width)`` window of pretraining; 0 uses the window itself.
    pretrained_window_sizes: tuple[tuple[int, int], ...] = ()

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        sizes = getattr(hf_config, "pretrained_window_sizes", None) or (0,) * 4
        sizes = tuple(tuple(s) if isinstance(s, (list, tuple)) else (s, s) for s in sizes)
        return dict(super().hf_fields(hf_config), pretrained_window_sizes=sizes)

    def refuse_unbuildable(self) -> None:
        if self.use_absolute_embeddings:
            raise ConfigError(
                f"{self.model_type}: use_absolute_embeddings is refused: transformers' table has "
                "one row more than there are patches and cannot be added to them"
            )
        if len(self.pretrained_window_sizes) < len(self.depths):
            raise ConfigError(f"{self.model_type}: pretrained_window_sizes has too few stages")
        for stage in range(len(self.depths)):
            if self.window_and_shift(stage, 0)[0] < 1:
                raise ConfigError(f"{self.model_type}: stage {stage} has no patch rows")

    def window_and_shift(self, stage: int, block: int) -> tuple[int, int]:
        """transformers sizes windows from the floor-divided grid height of the stage."""
        rows = self.image_size[0] // self.patch_size // 2**stage
        if rows <= self.window_size:
            return rows, 0
        return self.window_size, self.window_size // 2 if block % 2 else 0


def log_coords_table(window: int, pretrained: tuple[int, int]) -> np.ndarray:
    """``[(2w-1)^2, 2]`` relative offsets scaled to +-8, then ``sign * log2(1 + |x|) / 3``."""
    offsets = np.arange(-(window - 1), window).astype(np.float32)
    table = np.stack(np.meshgrid(offsets, offsets, indexing="ij"), axis=-1)
    if pretrained[0] > 0:
        table = table / np.array([pretrained[0] - 1, pretrained[1] - 1], np.float32)
    elif window > 1:
        table = table / np.float32(window - 1)
    table = table * np.float32(8)
    table = np.sign(table) * np.log2(np.abs(table) + np.float32(1)) / np.float32(3)
    return table.reshape(-1, 2).astype(np.float32)


class Swinv2SelfAttention(SwinSelfAttention):
    """Cosine attention: unit queries and keys, scores times ``exp(min(logit_scale, log 100))``."""

    key_bias = False
    mask_copies = 2  # transformers adds the shift mask to the scores twice

    def make_position_bias(self, config: Swinv2Config, stage: int) -> None:
        self.logit_scale = nn.Parameter([self.heads, 1, 1])
        self.continuous_position_bias_mlp = Sequential(
            [Linear(2, 512, bias=True), Activation("relu"), Linear(512, self.heads)]
        )
        self.pretrained = config.pretrained_window_sizes[stage]

    def bias_table(self, op):
        coords = constant(op, log_coords_table(self.window, self.pretrained), self.query.weight)
        return self.continuous_position_bias_mlp(op, coords)  # [(2w-1)^2, heads]

    def position_bias(self, op):
        sixteen = constant(op, np.array(16.0), self.query.weight)
        return op.Mul(op.Sigmoid(super().position_bias(op)), sixteen)  # [heads, N, N]

    def unit_heads(self, op, x):
        """``[windows, N, C]`` -> ``[windows, N, heads, d]``, each head's vector of unit length."""
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, self.heads, -1]))
        norm = op.ReduceL2(x, op.Constant(value_ints=[-1]), keepdims=1)
        return op.Div(x, op.Max(norm, constant(op, np.array(1e-12), self.query.weight)))

    def forward(self, op, x):  # [batch * windows, N, C]
        top = constant(op, np.array(math.log(100.0)), self.query.weight)
        scale = op.Exp(op.Min(self.logit_scale, top))  # [heads, 1, 1]
        scale = op.Reshape(scale, op.Constant(value_ints=[self.heads, 1]))
        merged = op.Constant(value_ints=[0, 0, -1])
        # the scale goes on the unit queries: (q * s) . k == (q . k) * s
        q = op.Reshape(op.Mul(self.unit_heads(op, self.query(op, x)), scale), merged)
        k = op.Reshape(self.unit_heads(op, self.key(op, x)), merged)
        bias = self.attention_bias(op, x)
        return bidirectional_attention(op, q, k, self.value(op, x), bias, self.heads, 1.0)


class Swinv2Attention(SwinAttention):
    self_attention_class = Swinv2SelfAttention


class Swinv2Layer(SwinLayer):
    """Post-norm block: ``x + norm(windowed_attention(x))``, then ``x + norm(mlp(x))``."""

    attention_class = Swinv2Attention

    def forward(self, op, x):  # [batch, h*w, C]
        x = op.Add(x, self.layernorm_before(op, self.windowed(op, x)))
        return op.Add(x, self.layernorm_after(op, self.mlp(op, x)))


class Swinv2PatchMerging(SwinPatchMerging):
    """``norm(reduction(x))``: the norm over the ``2C`` reduced channels."""

    def make_norm(self, dim: int) -> LayerNorm:
        return LayerNorm(2 * dim)

    def forward(self, op, x):
        return self.norm(op, self.reduction(op, self.merge(op, x)))


class Swinv2Stage(SwinStage):
    layer_class = Swinv2Layer
    merging_class = Swinv2PatchMerging


class Swinv2Encoder(SwinEncoder):
    stage_class = Swinv2Stage


class Swinv2Model(SwinModel):
    encoder_class = Swinv2Encoder


class Swinv2ForImageClassification(SwinForImageClassification):
    config_class = Swinv2Config
    model_class = Swinv2Model
    base_model_prefix = "swinv2"


MODEL_TYPES = {"swinv2": Swinv2ForImageClassification}
