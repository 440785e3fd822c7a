"""PVTv2: overlapping patch embeddings, spatial-reduction (or linear) attention, conv MLPs.

The module tree follows ``PvtV2For*`` checkpoints (``pvt_v2.encoder.layers.0.patch_embedding.proj``,
``...layers.0.blocks.0.attention.spatial_reduction``, ``...blocks.0.mlp.dwconv.dwconv``,
``classifier``); a bare ``PvtV2Model`` checkpoint gets the ``pvt_v2.`` prefix. With
``linear_attention`` the keys come from a 7x7 adaptive average pool, a 1x1 conv, LayerNorm
and GELU (and the MLP gets a ReLU). ``last_hidden_state`` is ``[batch, C, h, w]`` (no
pooler); the classifier reads its spatial mean.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear
from mobius_vision.models._conv import Conv2d, activation
from mobius_vision.models._pyramid import (
    PyramidConfig,
    PyramidForImageClassification,
    PyramidModel,
    conv_grids,
    grid_to_tokens,
    tokens_to_grid,
)
from mobius_vision.models.pvt import PvtEfficientSelfAttention, PvtFFN, PvtLayer, check_heads

#: ``nn.AdaptiveAvgPool2d(7)`` of the linear attention.
POOLED = 7


@dataclass
class PvtV2Config(PyramidConfig):
    hidden_sizes: tuple[int, ...] = (32, 64, 160, 256)
    depths: tuple[int, ...] = (2, 2, 2, 2)
    sr_ratios: tuple[int, ...] = (8, 4, 2, 1)
    patch_sizes: tuple[int, ...] = (7, 3, 3, 3)
    strides: tuple[int, ...] = (4, 2, 2, 2)
    num_attention_heads: tuple[int, ...] = (1, 2, 5, 8)
    mlp_ratios: tuple[int, ...] = (8, 8, 4, 4)
    layer_norm_eps: float = 1e-6
    qkv_bias: bool = True
    linear_attention: bool = False

    square_lists: ClassVar[tuple[str, ...]] = ("patch_sizes",)

    def check(self) -> None:
        check_heads(self.model_type, self.hidden_sizes, self.num_attention_heads)

    def grids(self) -> list[tuple[int, int]]:
        """Each stage's token grid: a conv of kernel ``patch``, padding ``patch // 2``."""
        pads = [p // 2 for p in self.patch_sizes]
        return conv_grids(self.image_size, self.patch_sizes, self.strides, pads)


class PvtV2OverlapPatchEmbeddings(nn.Module):
    def __init__(self, config: PvtV2Config, i: int) -> None:
        super().__init__()
        in_ch = config.num_channels if i == 0 else config.hidden_sizes[i - 1]
        p, dim = config.patch_sizes[i], config.hidden_sizes[i]
        self.proj = Conv2d(in_ch, dim, p, stride=config.strides[i], padding=p // 2)
        self.layer_norm = LayerNorm(dim, config.layer_norm_eps)

    def forward(self, op, x):
        return self.layer_norm(op, grid_to_tokens(op, self.proj(op, x)))  # [batch, tokens, C]


def adaptive_average_pool(op, x, h: int, w: int, out: int):
    """``nn.AdaptiveAvgPool2d(out)`` of ``[batch, C, h, w]``; bins of uneven sizes as matrices."""
    if h % out == 0 and w % out == 0:
        kernel = [h // out, w // out]
        return op.AveragePool(x, kernel_shape=kernel, strides=kernel)

    def bins(size: int) -> np.ndarray:  # [out, size]: row i averages torch's i-th bin
        m = np.zeros((out, size), np.float32)
        for i in range(out):
            start, end = (i * size) // out, -((-(i + 1) * size) // out)
            m[i, start:end] = 1.0 / (end - start)
        return m

    rows = op.CastLike(op.Constant(value=ir.tensor(bins(h))), x)
    cols = op.CastLike(op.Constant(value=ir.tensor(np.ascontiguousarray(bins(w).T))), x)
    return op.MatMul(op.MatMul(rows, x), cols)  # [batch, C, out, out]


class PvtV2SelfAttention(PvtEfficientSelfAttention):
    """PVT's attention plus ``proj``; linear attention reduces a 7x7 pool with a 1x1 conv and GELU."""

    reduction_name = "spatial_reduction"

    def __init__(self, config: PvtV2Config, i: int, grid) -> None:
        dim, ratio = config.hidden_sizes[i], config.sr_ratios[i]
        kernel = 1 if config.linear_attention else (ratio if ratio > 1 else None)
        super().__init__(config, dim, config.num_attention_heads[i], kernel, grid)
        self.proj = Linear(dim, dim, bias=True)
        self.linear = config.linear_attention
        self.gelu = activation("gelu")

    def reduce(self, op, x):
        if not self.linear:
            return super().reduce(op, x)
        y = adaptive_average_pool(
            op, tokens_to_grid(op, x, self.dim, *self.grid), *self.grid, POOLED
        )
        y = self.layer_norm(op, grid_to_tokens(op, self.spatial_reduction(op, y)))
        return self.gelu(op, y)  # [batch, POOLED * POOLED, C]

    def forward(self, op, x):
        return self.proj(op, super().forward(op, x))


class PvtV2DepthWiseConv(nn.Module):
    """A 3x3 depthwise conv over the token grid."""

    def __init__(self, dim: int, grid) -> None:
        super().__init__()
        self.dwconv = Conv2d(dim, dim, 3, padding=1, groups=dim)
        self.dim, self.grid = dim, grid

    def forward(self, op, x):
        return grid_to_tokens(op, self.dwconv(op, tokens_to_grid(op, x, self.dim, *self.grid)))


class PvtV2ConvFeedForwardNetwork(PvtFFN):
    """PVT's MLP with a depthwise conv (after a ReLU in linear attention) between its layers."""

    def __init__(self, config: PvtV2Config, i: int, grid) -> None:
        super().__init__(config, i, grid)
        self.relu = activation("relu" if config.linear_attention else None)
        self.dwconv = PvtV2DepthWiseConv(int(config.hidden_sizes[i] * config.mlp_ratios[i]), grid)

    def mix_tokens(self, op, x):
        return self.dwconv(op, self.relu(op, x))


class PvtV2BlockLayer(PvtLayer):
    attention_class = PvtV2SelfAttention
    mlp_class = PvtV2ConvFeedForwardNetwork


class PvtV2EncoderLayer(nn.Module):
    """One stage: patch embedding, blocks, LayerNorm, back to ``[batch, C, h, w]``."""

    def __init__(self, config: PvtV2Config, i: int) -> None:
        super().__init__()
        self.grid, self.dim = config.grids()[i], config.hidden_sizes[i]
        self.patch_embedding = PvtV2OverlapPatchEmbeddings(config, i)
        self.blocks = nn.ModuleList(
            [PvtV2BlockLayer(config, i, self.grid) for _ in range(config.depths[i])]
        )
        self.layer_norm = LayerNorm(self.dim, config.layer_norm_eps)

    def forward(self, op, x):
        x = self.patch_embedding(op, x)
        for block in self.blocks:
            x = block(op, x)
        return tokens_to_grid(op, self.layer_norm(op, x), self.dim, *self.grid)


class PvtV2Encoder(nn.Module):
    def __init__(self, config: PvtV2Config) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [PvtV2EncoderLayer(config, i) for i in range(len(config.depths))]
        )

    def forward(self, op, x):
        for layer in self.layers:
            x = layer(op, x)
        return x


class PvtV2Model(PyramidModel):
    encoder_class = PvtV2Encoder


class PvtV2ForImageClassification(PyramidForImageClassification):
    """``last_hidden_state`` and, with the head, the classifier on its spatial mean."""

    config_class = PvtV2Config
    model_class = PvtV2Model
    base_model_prefix = "pvt_v2"


MODEL_TYPES = {"pvt_v2": PvtV2ForImageClassification}
