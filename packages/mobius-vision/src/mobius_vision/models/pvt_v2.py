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
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear, bidirectional_attention
from mobius.errors import ConfigError
from mobius_vision.config import VisionConfig
from mobius_vision.models._conv import Conv2d, ConvNetForImageClassification, activation
from mobius_vision.models.pvt import grid_to_tokens, tokens_to_grid

#: ``nn.AdaptiveAvgPool2d(7)`` of the linear attention.
POOLED = 7


@dataclass
class PvtV2Config(VisionConfig):
    hidden_sizes: tuple[int, ...] = (32, 64, 160, 256)
    depths: tuple[int, ...] = (2, 2, 2, 2)
    sr_ratios: tuple[int, ...] = (8, 4, 2, 1)
    patch_sizes: tuple[int, ...] = (7, 3, 3, 3)
    strides: tuple[int, ...] = (4, 2, 2, 2)
    num_attention_heads: tuple[int, ...] = (1, 2, 5, 8)
    mlp_ratios: tuple[int, ...] = (8, 8, 4, 4)
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-6
    qkv_bias: bool = True
    linear_attention: bool = False

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        n, t = hf_config.num_encoder_blocks, hf_config.model_type
        if not all(isinstance(p, int) for p in hf_config.patch_sizes[:n]):
            raise ConfigError(f"{t}: only square (int) patch_sizes are supported")
        if hf_config.hidden_sizes[-1] != hf_config.hidden_sizes[n - 1]:
            raise ConfigError(f"{t}: the classifier's hidden_sizes[-1] is not the last stage's")
        for dim, heads in zip(
            hf_config.hidden_sizes[:n], hf_config.num_attention_heads[:n], strict=True
        ):
            if dim % heads:
                raise ConfigError(f"{t}: hidden size {dim} is not a multiple of {heads} heads")
        return dict(
            super().hf_fields(hf_config),
            hidden_sizes=tuple(hf_config.hidden_sizes[:n]),
            depths=tuple(hf_config.depths[:n]),
            sr_ratios=tuple(hf_config.sr_ratios[:n]),
            patch_sizes=tuple(hf_config.patch_sizes[:n]),
            strides=tuple(hf_config.strides[:n]),
            num_attention_heads=tuple(hf_config.num_attention_heads[:n]),
            mlp_ratios=tuple(hf_config.mlp_ratios[:n]),
            hidden_act=hf_config.hidden_act,
            layer_norm_eps=hf_config.layer_norm_eps,
            qkv_bias=bool(hf_config.qkv_bias),
            linear_attention=bool(hf_config.linear_attention),
        )

    def grids(self) -> list[tuple[int, int]]:
        """Each stage's token grid: a conv of kernel ``patch``, padding ``patch // 2``."""
        h, w = self.image_size
        grids = []
        for patch, stride in zip(self.patch_sizes, self.strides, strict=True):
            h, w = ((s + 2 * (patch // 2) - patch) // stride + 1 for s in (h, w))
            grids.append((h, w))
        return grids


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


class PvtV2SelfAttention(nn.Module):
    def __init__(self, config: PvtV2Config, dim: int, heads: int, ratio: int, grid) -> None:
        super().__init__()
        bias = config.qkv_bias
        self.query, self.key, self.value = (Linear(dim, dim, bias) for _ in range(3))
        self.proj = Linear(dim, dim, bias=True)
        self.linear = config.linear_attention
        self.reduces = self.linear or ratio > 1
        if self.reduces:
            kernel = 1 if self.linear else ratio
            self.spatial_reduction = Conv2d(dim, dim, kernel, stride=kernel)
            self.layer_norm = LayerNorm(dim, config.layer_norm_eps)
        self.gelu = activation("gelu")
        self.heads, self.scale, self.dim, self.grid = heads, (dim // heads) ** -0.5, dim, grid

    def reduce(self, op, x):
        y = tokens_to_grid(op, x, self.dim, *self.grid)  # [batch, C, h, w]
        if self.linear:
            y = adaptive_average_pool(op, y, *self.grid, POOLED)
        y = self.layer_norm(op, grid_to_tokens(op, self.spatial_reduction(op, y)))
        return self.gelu(op, y) if self.linear else y  # [batch, reduced tokens, C]

    def forward(self, op, x):
        kv = self.reduce(op, x) if self.reduces else x
        q, k, v = self.query(op, x), self.key(op, kv), self.value(op, kv)
        return self.proj(op, bidirectional_attention(op, q, k, v, None, self.heads, self.scale))


class PvtV2DepthWiseConv(nn.Module):
    """A 3x3 depthwise conv over the token grid."""

    def __init__(self, dim: int, grid) -> None:
        super().__init__()
        self.dwconv = Conv2d(dim, dim, 3, padding=1, groups=dim)
        self.dim, self.grid = dim, grid

    def forward(self, op, x):
        return grid_to_tokens(op, self.dwconv(op, tokens_to_grid(op, x, self.dim, *self.grid)))


class PvtV2ConvFeedForwardNetwork(nn.Module):
    def __init__(self, config: PvtV2Config, dim: int, hidden: int, grid) -> None:
        super().__init__()
        self.dense1 = Linear(dim, hidden, bias=True)
        self.relu = activation("relu" if config.linear_attention else None)
        self.dwconv = PvtV2DepthWiseConv(hidden, grid)
        self.act = activation(config.hidden_act)
        self.dense2 = Linear(hidden, dim, bias=True)

    def forward(self, op, x):
        x = self.dwconv(op, self.relu(op, self.dense1(op, x)))
        return self.dense2(op, self.act(op, x))


class PvtV2BlockLayer(nn.Module):
    """Pre-norm attention and conv MLP, both residual."""

    def __init__(self, config: PvtV2Config, i: int, grid) -> None:
        super().__init__()
        dim, eps = config.hidden_sizes[i], config.layer_norm_eps
        heads, ratio = config.num_attention_heads[i], config.sr_ratios[i]
        self.layer_norm_1 = LayerNorm(dim, eps)
        self.attention = PvtV2SelfAttention(config, dim, heads, ratio, grid)
        self.layer_norm_2 = LayerNorm(dim, eps)
        hidden = int(dim * config.mlp_ratios[i])
        self.mlp = PvtV2ConvFeedForwardNetwork(config, dim, hidden, grid)

    def forward(self, op, x):
        x = op.Add(x, self.attention(op, self.layer_norm_1(op, x)))
        return op.Add(x, self.mlp(op, self.layer_norm_2(op, x)))


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


class PvtV2Model(nn.Module):
    def __init__(self, config: PvtV2Config) -> None:
        super().__init__()
        self.encoder = PvtV2Encoder(config)

    def forward(self, op, pixel_values):
        return self.encoder(op, pixel_values)


class PvtV2ForImageClassification(ConvNetForImageClassification):
    """``last_hidden_state`` and, with the head, the classifier on its spatial mean."""

    config_class = PvtV2Config
    model_class = PvtV2Model
    base_model_prefix = "pvt_v2"

    def make_classifier(self, config) -> nn.Module:
        return Linear(config.hidden_sizes[-1], config.num_labels, bias=True)

    def output_shapes(self) -> dict[str, list]:
        c = self.config
        h, w = c.grids()[-1]
        return {
            "last_hidden_state": ["batch", c.hidden_sizes[-1], h, w],
            "logits": ["batch", c.num_labels],
        }

    def forward(self, op, pixel_values):
        hidden = self.base_model(op, pixel_values)
        if self.classifier is None:
            return {"last_hidden_state": hidden}
        pooled = op.ReduceMean(hidden, op.Constant(value_ints=[2, 3]), keepdims=0)
        return {"last_hidden_state": hidden, "logits": self.classifier(op, pooled)}


MODEL_TYPES = {"pvt_v2": PvtV2ForImageClassification}
