"""EfficientNet: a strided 3x3 stem, MBConv blocks (1x1 expansion, depthwise kxk,
squeeze-and-excitation, 1x1 projection; a residual on every block but a stage's first),
a 1x1 top conv, global mean or max pool.

Stride-2 depthwise convs zero-pad as the Keras original does (``correct_pad``: one less
on the top/left unless the block is listed in ``depthwise_padding``). The module tree
follows ``EfficientNetFor*`` checkpoints (``efficientnet.embeddings.convolution``,
``efficientnet.encoder.blocks.3.squeeze_excite.reduce``, ``...top_conv``, ``classifier``).
``pooler_output`` is ``[batch, hidden_dim]``: transformers' ``AvgPool2d(hidden_dim,
ceil_mode=True)`` is a global pool for any map smaller than ``hidden_dim``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Linear
from mobius.errors import ConfigError
from mobius_vision.config import VisionConfig
from mobius_vision.models._conv import (
    Activation,
    BatchNorm2d,
    Conv2d,
    ConvNetForImageClassification,
    Sequential,
    activation,
)


@dataclass
class EfficientNetConfig(VisionConfig):
    width_coefficient: float = 2.0
    depth_coefficient: float = 3.1
    depth_divisor: int = 8
    kernel_sizes: tuple[int, ...] = (3, 3, 5, 3, 5, 5, 3)
    in_channels: tuple[int, ...] = (32, 16, 24, 40, 80, 112, 192)
    out_channels: tuple[int, ...] = (16, 24, 40, 80, 112, 192, 320)
    depthwise_padding: tuple[int, ...] = ()
    strides: tuple[int, ...] = (1, 2, 2, 2, 1, 2, 1)
    num_block_repeats: tuple[int, ...] = (1, 2, 2, 3, 3, 4, 1)
    expand_ratios: tuple[int, ...] = (1, 6, 6, 6, 6, 6, 6)
    squeeze_expansion_ratio: float = 0.25
    hidden_act: str = "swish"
    hidden_dim: int = 2560
    pooling_type: str = "mean"
    batch_norm_eps: float = 1e-3

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        names = [f for f in cls.__dataclass_fields__ if f not in VisionConfig.__dataclass_fields__]
        fields = {n: getattr(hf_config, n) for n in names}
        fields = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
        if fields["pooling_type"] not in ("mean", "max"):
            raise ConfigError(
                f"efficientnet pooling_type {fields['pooling_type']!r} is not mean/max"
            )
        return dict(super().hf_fields(hf_config), **fields)

    def round_filters(self, channels: int) -> int:
        divisor, channels = self.depth_divisor, channels * self.width_coefficient
        new_dim = max(divisor, int(channels + divisor / 2) // divisor * divisor)
        return int(new_dim + divisor if new_dim < 0.9 * channels else new_dim)

    def blocks(self) -> list[dict[str, Any]]:
        """The keyword arguments of every MBConv block, in order."""
        blocks = []
        for i, repeats in enumerate(self.num_block_repeats):
            in_dim, out_dim = (
                self.round_filters(self.in_channels[i]),
                self.round_filters(self.out_channels[i]),
            )
            for j in range(int(math.ceil(self.depth_coefficient * repeats))):
                blocks.append(
                    dict(
                        in_dim=out_dim if j else in_dim,
                        out_dim=out_dim,
                        stride=1 if j else self.strides[i],
                        expand_ratio=self.expand_ratios[i],
                        kernel_size=self.kernel_sizes[i],
                        residual=j > 0,
                        adjust_padding=len(blocks) not in self.depthwise_padding,
                    )
                )
        return blocks


class ConvBN(nn.Module):
    """Conv (no bias), BatchNorm, optional activation, with the checkpoint's per-layer names."""

    def __init__(self, config, conv: Conv2d, out_ch: int, names: tuple[str, str], act=True):
        super().__init__()
        self.conv_name, self.norm_name = names
        setattr(self, self.conv_name, conv)
        setattr(self, self.norm_name, BatchNorm2d(out_ch, eps=config.batch_norm_eps))
        self.act = activation(config.hidden_act if act else None)

    def forward(self, op, x):
        x = getattr(self, self.conv_name)(op, x)
        return self.act(op, getattr(self, self.norm_name)(op, x))


class EfficientNetEmbeddings(ConvBN):
    def __init__(self, config: EfficientNetConfig) -> None:
        out = config.round_filters(32)
        # ZeroPad2d((0, 1, 0, 1)) then a valid conv: pads are [top, left, bottom, right].
        conv = Conv2d(config.num_channels, out, 3, 2, (0, 0, 1, 1), bias=False)
        super().__init__(config, conv, out, ("convolution", "batchnorm"))


class EfficientNetSqueezeExciteLayer(nn.Module):
    def __init__(self, config: EfficientNetConfig, in_dim: int, dim: int) -> None:
        super().__init__()
        dim_se = max(1, int(in_dim * config.squeeze_expansion_ratio))
        self.reduce = Conv2d(dim, dim_se, 1)
        self.act_reduce = Activation(config.hidden_act)
        self.expand = Conv2d(dim_se, dim, 1)

    def forward(self, op, x):
        s = self.act_reduce(op, self.reduce(op, op.GlobalAveragePool(x)))
        return op.Mul(x, op.Sigmoid(self.expand(op, s)))


class EfficientNetBlock(nn.Module):
    def __init__(self, config, in_dim, out_dim, stride, expand_ratio, kernel_size, residual,
                 adjust_padding) -> None:  # fmt: skip
        super().__init__()
        dim = in_dim * expand_ratio
        self.expansion = (
            ConvBN(config, Conv2d(in_dim, dim, 1, bias=False), dim, ("expand_conv", "expand_bn"))
            if expand_ratio != 1
            else None
        )
        half = kernel_size // 2
        if stride == 2:  # correct_pad: [top, left, bottom, right]
            before = half - 1 if adjust_padding else half
            pads = (before, before, half, half)
        else:
            pads = (half,) * 4
        conv = Conv2d(dim, dim, kernel_size, stride, pads, groups=dim, bias=False)
        self.depthwise_conv = ConvBN(config, conv, dim, ("depthwise_conv", "depthwise_norm"))
        self.squeeze_excite = EfficientNetSqueezeExciteLayer(config, in_dim, dim)
        conv = Conv2d(dim, out_dim, 1, bias=False)
        self.projection = ConvBN(config, conv, out_dim, ("project_conv", "project_bn"), act=False)
        self.residual = residual
        self.pads, self.stride, self.kernel_size = pads, stride, kernel_size

    def output_size(self, size: int) -> int:
        return (size + self.pads[0] + self.pads[2] - self.kernel_size) // self.stride + 1

    def forward(self, op, x):
        y = x if self.expansion is None else self.expansion(op, x)
        y = self.projection(op, self.squeeze_excite(op, self.depthwise_conv(op, y)))
        return op.Add(y, x) if self.residual else y


class EfficientNetEncoder(nn.Module):
    def __init__(self, config: EfficientNetConfig) -> None:
        super().__init__()
        specs = config.blocks()
        self.blocks = Sequential([EfficientNetBlock(config, **spec) for spec in specs])
        top = config.round_filters(1280)
        if top != config.hidden_dim:
            raise ConfigError(f"efficientnet hidden_dim {config.hidden_dim} != top conv {top}")
        self.top_conv = Conv2d(specs[-1]["out_dim"], top, 1, bias=False)
        self.top_bn = BatchNorm2d(top, eps=config.batch_norm_eps)
        self.top_activation = activation(config.hidden_act)

    def forward(self, op, x):
        x = self.top_conv(op, self.blocks(op, x))
        return self.top_activation(op, self.top_bn(op, x))


class EfficientNetModel(nn.Module):
    def __init__(self, config: EfficientNetConfig) -> None:
        super().__init__()
        self.embeddings = EfficientNetEmbeddings(config)
        self.encoder = EfficientNetEncoder(config)
        self.max_pool = config.pooling_type == "max"

    def forward(self, op, pixel_values):
        x = self.encoder(op, self.embeddings(op, pixel_values))
        pooled = op.GlobalMaxPool(x) if self.max_pool else op.GlobalAveragePool(x)
        return x, op.Flatten(pooled, axis=1)


class EfficientNetForImageClassification(ConvNetForImageClassification):
    config_class = EfficientNetConfig
    model_class = EfficientNetModel
    base_model_prefix = "efficientnet"

    def make_classifier(self, config) -> nn.Module:
        return Linear(config.hidden_dim, config.num_labels, bias=True)

    def output_shapes(self) -> dict[str, list]:
        c = self.config
        h, w = ((s - 2) // 2 + 1 for s in c.image_size)  # the stem
        for block in self.base_model.encoder.blocks:
            h, w = block.output_size(h), block.output_size(w)
        return {
            "last_hidden_state": ["batch", c.hidden_dim, h, w],
            "pooler_output": ["batch", c.hidden_dim],
            "logits": ["batch", c.num_labels],
        }


MODEL_TYPES = {"efficientnet": EfficientNetForImageClassification}
