"""PoolFormer: conv patch embeddings and blocks whose token mixer is ``avg_pool(x) - x``.

The module tree follows ``PoolFormerFor*`` checkpoints (``poolformer.encoder.patch_embeddings.0
.projection``, ``poolformer.encoder.block.0.0.output.conv1``, ``...before_norm``, ``norm``,
``classifier``); a bare ``PoolFormerModel`` checkpoint gets the ``poolformer.`` prefix. The
norms are one-group GroupNorms; ``use_layer_scale`` scales both residual branches per channel.
``last_hidden_state`` is ``[batch, C, h, w]`` (no pooler); the classifier reads the spatial
mean of its GroupNorm (``norm``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from onnxscript import nn

from mobius.errors import ConfigError
from mobius_vision.models._conv import Conv2d, activation
from mobius_vision.models._pyramid import (
    PyramidConfig,
    PyramidForImageClassification,
    PyramidModel,
    conv_grids,
)


@dataclass
class PoolFormerConfig(PyramidConfig):
    hidden_sizes: tuple[int, ...] = (64, 128, 320, 512)
    depths: tuple[int, ...] = (2, 2, 6, 2)
    patch_sizes: tuple[int, ...] = (7, 3, 3, 3)
    strides: tuple[int, ...] = (4, 2, 2, 2)
    padding: tuple[int, ...] = (2, 1, 1, 1)
    pool_size: int = 3
    mlp_ratio: float = 4.0
    use_layer_scale: bool = True

    square_lists: ClassVar[tuple[str, ...]] = ("patch_sizes", "strides", "padding")

    def check(self) -> None:
        if self.pool_size % 2 == 0:
            raise ConfigError(
                f"{self.model_type}: an even pool_size changes the grid; x - pool(x) cannot add"
            )

    def grids(self) -> list[tuple[int, int]]:
        return conv_grids(self.image_size, self.patch_sizes, self.strides, self.padding)


class PoolFormerGroupNorm(nn.Module):
    """``nn.GroupNorm(1, C)``: normalise each sample over ``(C, h, w)``, then a per-channel affine."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter([dim])
        self.bias = nn.Parameter([dim])
        self.eps = eps

    def forward(self, op, x):
        axes = op.Constant(value_ints=[1, 2, 3])
        centred = op.Sub(x, op.ReduceMean(x, axes, keepdims=1))
        var = op.ReduceMean(op.Mul(centred, centred), axes, keepdims=1)
        y = op.Div(centred, op.Sqrt(op.Add(var, op.CastLike(self.eps, x))))
        channels = op.Constant(value_ints=[1, 2])
        return op.Add(
            op.Mul(y, op.Unsqueeze(self.weight, channels)), op.Unsqueeze(self.bias, channels)
        )


class PoolFormerEmbeddings(nn.Module):
    def __init__(self, in_ch: int, dim: int, kernel: int, stride: int, padding: int) -> None:
        super().__init__()
        self.projection = Conv2d(in_ch, dim, kernel, stride, padding)

    def forward(self, op, x):
        return self.projection(op, x)


class PoolFormerOutput(nn.Module):
    """The MLP as 1x1 convs."""

    def __init__(self, dim: int, hidden: int, act: str) -> None:
        super().__init__()
        self.conv1 = Conv2d(dim, hidden, 1)
        self.act = activation(act)
        self.conv2 = Conv2d(hidden, dim, 1)

    def forward(self, op, x):
        return self.conv2(op, self.act(op, self.conv1(op, x)))


class PoolFormerLayer(nn.Module):
    """``x + s1 * (pool(n1(x)) - n1(x))``, then ``x + s2 * mlp(n2(x))`` (``s`` with layer scale)."""

    def __init__(self, config: PoolFormerConfig, dim: int) -> None:
        super().__init__()
        self.output = PoolFormerOutput(dim, int(dim * config.mlp_ratio), config.hidden_act)
        self.before_norm = PoolFormerGroupNorm(dim)
        self.after_norm = PoolFormerGroupNorm(dim)
        scaled = config.use_layer_scale
        self.layer_scale_1 = nn.Parameter([dim]) if scaled else None
        self.layer_scale_2 = nn.Parameter([dim]) if scaled else None
        k, p = config.pool_size, config.pool_size // 2
        self.pool = dict(kernel_shape=[k, k], strides=[1, 1], pads=[p] * 4, count_include_pad=0)

    def scale(self, op, x, scale):
        if scale is None:
            return x
        return op.Mul(op.Unsqueeze(scale, op.Constant(value_ints=[1, 2])), x)

    def forward(self, op, x):
        y = self.before_norm(op, x)
        y = op.Sub(op.AveragePool(y, **self.pool), y)
        x = op.Add(x, self.scale(op, y, self.layer_scale_1))
        y = self.output(op, self.after_norm(op, x))
        return op.Add(x, self.scale(op, y, self.layer_scale_2))


class PoolFormerEncoder(nn.Module):
    def __init__(self, config: PoolFormerConfig) -> None:
        super().__init__()
        sizes = config.hidden_sizes
        self.patch_embeddings = nn.ModuleList(
            [
                PoolFormerEmbeddings(
                    config.num_channels if i == 0 else sizes[i - 1],
                    sizes[i],
                    config.patch_sizes[i],
                    config.strides[i],
                    config.padding[i],
                )
                for i in range(len(sizes))
            ]
        )
        self.block = nn.ModuleList(
            [
                nn.ModuleList([PoolFormerLayer(config, sizes[i]) for _ in range(depth)])
                for i, depth in enumerate(config.depths)
            ]
        )

    def forward(self, op, x):
        for embeddings, layers in zip(self.patch_embeddings, self.block, strict=True):
            x = embeddings(op, x)  # [batch, C, h, w]
            for layer in layers:
                x = layer(op, x)
        return x


class PoolFormerModel(PyramidModel):
    encoder_class = PoolFormerEncoder


class PoolFormerForImageClassification(PyramidForImageClassification):
    """``last_hidden_state`` and, with the head, the classifier on the mean of ``norm(hidden)``."""

    config_class = PoolFormerConfig
    model_class = PoolFormerModel
    base_model_prefix = "poolformer"
    head_prefixes = ("classifier.", "norm.")

    def __init__(self, config: PoolFormerConfig) -> None:
        super().__init__(config)
        classify = self.classifier is not None
        self.norm = PoolFormerGroupNorm(config.hidden_sizes[-1]) if classify else None

    def pool(self, op, hidden):
        return super().pool(op, self.norm(op, hidden))

    @property
    def ignored(self) -> tuple[str, ...]:
        return super().ignored + (() if self.norm is not None else ("norm.*",))


MODEL_TYPES = {"poolformer": PoolFormerForImageClassification}
