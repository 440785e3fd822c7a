"""TextNet: a strided conv stem, stages of RepVGG-style layers, a 2x2 adaptive average pool.

Each layer sums a kxl conv, a kx1 conv (unless l is 1), a 1xl conv (unless k is 1), all with
BatchNorm, and a BatchNorm of its input where the shape is kept, then applies ReLU: the
training-time branches as transformers keeps them, not fused. The module tree follows
``TextNetFor*`` checkpoints (``textnet.stem.conv``, ``textnet.encoder.stages.1.stage.0
.vertical_conv``, ``...rbr_identity``, ``fc``); a bare ``TextNetModel`` checkpoint gets the
``textnet.`` prefix. ``last_hidden_state`` is ``[batch, C, h, w]``; ``pooler_output`` is
``AdaptiveAvgPool2d((2, 2))`` of it, ``[batch, C, 2, 2]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Linear
from mobius.errors import ConfigError
from mobius.model import Model
from mobius.weights import rename_prefixes
from mobius_vision.config import VisionConfig
from mobius_vision.models._conv import BATCHNORM_COUNTERS, BatchNorm2d, activation


@dataclass
class TextNetConfig(VisionConfig):
    stem_kernel_size: int = 3
    stem_stride: int = 2
    stem_out_channels: int = 64
    stem_act_func: str | None = "relu"
    conv_layer_kernel_sizes: tuple = ()  # per stage, per layer: (kh, kw)
    conv_layer_strides: tuple = ()  # per stage, per layer
    hidden_sizes: tuple[int, ...] = (64, 64, 128, 256, 512)
    batch_norm_eps: float = 1e-5

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        c = hf_config
        if not isinstance(c.stem_kernel_size, int):
            # transformers reads the missing ``config.kernel_size`` for a tuple stem kernel
            raise ConfigError("textnet: only an int stem_kernel_size is supported")
        kernels = tuple(tuple(tuple(k) for k in stage) for stage in c.conv_layer_kernel_sizes)
        if any(k % 2 == 0 for stage in kernels for kernel in stage for k in kernel):
            raise ConfigError("textnet: an even conv kernel misaligns the branches of a layer")
        return dict(
            super().hf_fields(hf_config),
            num_channels=c.stem_num_channels,
            stem_kernel_size=c.stem_kernel_size,
            stem_stride=c.stem_stride,
            stem_out_channels=c.stem_out_channels,
            stem_act_func=c.stem_act_func,
            conv_layer_kernel_sizes=kernels,
            conv_layer_strides=tuple(tuple(s) for s in c.conv_layer_strides),
            hidden_sizes=tuple(c.hidden_sizes),
            batch_norm_eps=c.batch_norm_eps,
        )


class TextNetConv2d(nn.Module):
    """A bias-free ``torch.nn.Conv2d`` with a ``(kh, kw)`` kernel and ``(ph, pw)`` padding."""

    def __init__(self, in_ch: int, out_ch: int, kernel, stride: int, padding) -> None:
        super().__init__()
        self.weight = nn.Parameter([out_ch, in_ch, *kernel])
        (ph, pw), self.kernel, self.stride = padding, kernel, stride
        self.attrs = dict(
            kernel_shape=list(kernel), strides=[stride, stride], pads=[ph, pw, ph, pw]
        )

    def out_size(self, height: int, width: int) -> tuple[int, int]:
        pads = self.attrs["pads"]
        return tuple(
            (n + 2 * p - k) // self.stride + 1
            for n, p, k in zip((height, width), pads[:2], self.kernel, strict=True)
        )

    def forward(self, op, x):
        return op.Conv(x, self.weight, **self.attrs)


class TextNetConvLayer(nn.Module):
    """The stem: conv (``k // 2`` padding), BatchNorm, ``stem_act_func``."""

    def __init__(self, config: TextNetConfig) -> None:
        super().__init__()
        k, p = config.stem_kernel_size, config.stem_kernel_size // 2
        self.conv = TextNetConv2d(
            config.num_channels, config.stem_out_channels, (k, k), config.stem_stride, (p, p)
        )
        self.batch_norm = BatchNorm2d(config.stem_out_channels, config.batch_norm_eps)
        self.act = activation(config.stem_act_func)

    def forward(self, op, x):
        return self.act(op, self.batch_norm(op, self.conv(op, x)))


class TextNetRepConvLayer(nn.Module):
    """``relu(bn(kxl conv) + bn(kx1 conv) + bn(1xl conv) + bn(x))``, branches as present."""

    def __init__(self, config: TextNetConfig, in_ch, out_ch, kernel, stride) -> None:
        super().__init__()
        (kh, kw), eps = kernel, config.batch_norm_eps
        ph, pw = (kh - 1) // 2, (kw - 1) // 2
        self.main_conv = TextNetConv2d(in_ch, out_ch, (kh, kw), stride, (ph, pw))
        self.main_batch_norm = BatchNorm2d(out_ch, eps)
        vertical, horizontal = kw != 1, kh != 1
        self.vertical_conv = (
            TextNetConv2d(in_ch, out_ch, (kh, 1), stride, (ph, 0)) if vertical else None
        )
        self.vertical_batch_norm = BatchNorm2d(out_ch, eps) if vertical else None
        self.horizontal_conv = (
            TextNetConv2d(in_ch, out_ch, (1, kw), stride, (0, pw)) if horizontal else None
        )
        self.horizontal_batch_norm = BatchNorm2d(out_ch, eps) if horizontal else None
        identity = in_ch == out_ch and stride == 1
        self.rbr_identity = BatchNorm2d(in_ch, eps) if identity else None

    def forward(self, op, x):
        y = self.main_batch_norm(op, self.main_conv(op, x))
        if self.vertical_conv is not None:
            y = op.Add(y, self.vertical_batch_norm(op, self.vertical_conv(op, x)))
        if self.horizontal_conv is not None:
            y = op.Add(y, self.horizontal_batch_norm(op, self.horizontal_conv(op, x)))
        if self.rbr_identity is not None:
            y = op.Add(y, self.rbr_identity(op, x))
        return op.Relu(y)


class TextNetStage(nn.Module):
    def __init__(self, config: TextNetConfig, i: int) -> None:
        super().__init__()
        kernels, strides = config.conv_layer_kernel_sizes[i], config.conv_layer_strides[i]
        c_in, c_out = config.hidden_sizes[i], config.hidden_sizes[i + 1]
        self.stage = nn.ModuleList(
            [
                TextNetRepConvLayer(config, c_out if j else c_in, c_out, k, s)
                for j, (k, s) in enumerate(zip(kernels, strides, strict=False))
            ]
        )

    def forward(self, op, x):
        for layer in self.stage:
            x = layer(op, x)
        return x


class TextNetEncoder(nn.Module):
    def __init__(self, config: TextNetConfig) -> None:
        super().__init__()
        stages = range(len(config.conv_layer_kernel_sizes))
        self.stages = nn.ModuleList([TextNetStage(config, i) for i in stages])

    def forward(self, op, x):
        for stage in self.stages:
            x = stage(op, x)
        return x


def adaptive_average_pool(op, x, size: tuple[int, int], out: int = 2):
    """``AdaptiveAvgPool2d(out)`` on a static ``size``: bin ``i`` spans
    ``[floor(i n / out), ceil((i + 1) n / out))``, so bins of an odd size overlap."""
    for axis, n in zip((2, 3), size, strict=True):
        bins = [
            op.ReduceMean(
                op.Slice(
                    x,
                    op.Constant(value_ints=[i * n // out]),
                    op.Constant(value_ints=[math.ceil((i + 1) * n / out)]),
                    op.Constant(value_ints=[axis]),
                ),
                op.Constant(value_ints=[axis]),
                keepdims=1,
            )
            for i in range(out)
        ]
        x = op.Concat(*bins, axis=axis)
    return x


class TextNetModel(nn.Module):
    def __init__(self, config: TextNetConfig) -> None:
        super().__init__()
        self.stem = TextNetConvLayer(config)
        self.encoder = TextNetEncoder(config)

    def out_size(self, height: int, width: int) -> tuple[int, int]:
        size = self.stem.conv.out_size(height, width)
        for stage in self.encoder.stages:
            for layer in stage.stage:
                size = layer.main_conv.out_size(*size)
        return size

    def forward(self, op, pixel_values):
        return self.encoder(op, self.stem(op, pixel_values))  # [batch, C, h, w]


class TextNetForImageClassification(Model):
    """The backbone and its 2x2 pool or, with ``--head image-classification``, ``fc`` on the
    global average pool."""

    config_class = TextNetConfig
    task = "image-classification"

    def __init__(self, config: TextNetConfig) -> None:
        super().__init__()
        self.config = config
        self.textnet = TextNetModel(config)
        classify = config.head == "image-classification"
        self.fc = (
            Linear(config.hidden_sizes[-1], config.num_labels, bias=True) if classify else None
        )

    def output_shapes(self) -> dict[str, list]:
        h, w = self.textnet.out_size(*self.config.image_size)
        dim = self.config.hidden_sizes[-1]
        return {
            "last_hidden_state": ["batch", dim, h, w],
            "pooler_output": ["batch", dim, 2, 2],
            "logits": ["batch", self.config.num_labels],
        }

    def forward(self, op, pixel_values):
        hidden = self.textnet(op, pixel_values)
        if self.fc is not None:
            pooled = op.Flatten(op.GlobalAveragePool(hidden), axis=1)  # [batch, C]
            return {"last_hidden_state": hidden, "logits": self.fc(op, pooled)}
        size = self.textnet.out_size(*self.config.image_size)
        return {
            "last_hidden_state": hidden,
            "pooler_output": adaptive_average_pool(op, hidden, size),
        }

    @property
    def ignored(self) -> tuple[str, ...]:
        """BatchNorm counters and, without the head, the classifier."""
        return (BATCHNORM_COUNTERS,) + (() if self.fc is not None else ("fc.*",))

    def sanitize(self, weights: dict) -> dict:
        """A bare ``TextNetModel`` checkpoint gets the ``textnet.`` prefix."""
        return rename_prefixes(weights, {p: f"textnet.{p}" for p in ("stem.", "encoder.")})


MODEL_TYPES = {"textnet": TextNetForImageClassification}
