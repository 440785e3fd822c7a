"""MobileNetV2: a stem, 16 inverted residual blocks (1x1 expand, depthwise 3x3, 1x1 reduce),
a 1x1 conv to the output width, average pool.

TensorFlow "SAME" padding (``tf_padding``) is ONNX ``auto_pad=SAME_UPPER``; an
``output_stride`` below 32 dilates the later blocks instead of striding them. The module
tree follows ``MobileNetV2For*`` checkpoints (``mobilenet_v2.conv_stem.first_conv``,
``mobilenet_v2.layer.3.conv_3x3``..., ``classifier``); ``pooler_output`` is ``[batch, C]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Linear
from mobius_vision.config import VisionConfig
from mobius_vision.models._conv import (
    BatchNorm2d,
    Conv2d,
    ConvNetForImageClassification,
    Sequential,
    activation,
    global_average_pool,
    same_size,
)

CHANNELS = [16, 24, 24, 32, 32, 32, 64, 64, 64, 64, 96, 96, 96, 160, 160, 160, 320]
STRIDES = [2, 1, 2, 1, 1, 2, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1]


def make_divisible(value: float, divisor: int = 8, min_value: int | None = None) -> int:
    min_value = divisor if min_value is None else min_value
    new_value = max(min_value, int(value + divisor / 2) // divisor * divisor)
    return int(new_value + divisor if new_value < 0.9 * value else new_value)


@dataclass
class MobileNetV2Config(VisionConfig):
    depth_multiplier: float = 1.0
    depth_divisible_by: int = 8
    min_depth: int = 8
    expand_ratio: float = 6.0
    output_stride: int = 32
    first_layer_is_expansion: bool = True
    finegrained_output: bool = True
    hidden_act: str = "relu6"
    tf_padding: bool = True
    layer_norm_eps: float = 1e-3

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        names = [f for f in cls.__dataclass_fields__ if f not in VisionConfig.__dataclass_fields__]
        return dict(super().hf_fields(hf_config), **{n: getattr(hf_config, n) for n in names})

    def depth(self, channels: int) -> int:
        scaled = int(round(channels * self.depth_multiplier))
        return make_divisible(scaled, self.depth_divisible_by, self.min_depth)

    def blocks(self) -> list[tuple[int, int, int, int]]:
        """``(in, out, stride, dilation)`` of each inverted residual block."""
        channels = [self.depth(c) for c in CHANNELS]
        current, dilation, blocks = 2, 1, []
        for i, stride in enumerate(STRIDES):
            if current == self.output_stride:
                blocks.append((channels[i], channels[i + 1], 1, dilation))
                dilation *= stride
            else:
                blocks.append((channels[i], channels[i + 1], stride, 1))
                current *= stride
        return blocks

    @property
    def output_channels(self) -> int:
        if self.finegrained_output and self.depth_multiplier < 1.0:
            return 1280
        return self.depth(1280)


class MobileNetV2ConvLayer(nn.Module):
    """Conv (TF SAME or symmetric padding, no bias), BatchNorm, optional activation."""

    def __init__(
        self, config, in_ch, out_ch, kernel_size, stride=1, groups=1, dilation=1, act=True
    ) -> None:
        super().__init__()
        pad = "same" if config.tf_padding else (kernel_size - 1) // 2 * dilation
        self.convolution = Conv2d(
            in_ch, out_ch, kernel_size, stride, pad, dilation, groups, bias=False
        )
        self.normalization = BatchNorm2d(out_ch, eps=config.layer_norm_eps)
        self.act = activation(config.hidden_act if act else None)

    def forward(self, op, x):
        return self.act(op, self.normalization(op, self.convolution(op, x)))


class MobileNetV2InvertedResidual(nn.Module):
    def __init__(self, config, in_ch: int, out_ch: int, stride: int, dilation: int = 1) -> None:
        super().__init__()
        expanded = make_divisible(
            int(round(in_ch * config.expand_ratio)), config.depth_divisible_by, config.min_depth
        )
        self.use_residual = stride == 1 and in_ch == out_ch
        self.expand_1x1 = MobileNetV2ConvLayer(config, in_ch, expanded, 1)
        self.conv_3x3 = MobileNetV2ConvLayer(
            config, expanded, expanded, 3, stride, groups=expanded, dilation=dilation
        )
        self.reduce_1x1 = MobileNetV2ConvLayer(config, expanded, out_ch, 1, act=False)

    def forward(self, op, x):
        y = self.reduce_1x1(op, self.conv_3x3(op, self.expand_1x1(op, x)))
        return op.Add(x, y) if self.use_residual else y


class MobileNetV2Stem(nn.Module):
    def __init__(self, config: MobileNetV2Config) -> None:
        super().__init__()
        expanded, out_ch = config.depth(32), config.depth(CHANNELS[0])
        self.first_conv = MobileNetV2ConvLayer(config, config.num_channels, expanded, 3, 2)
        self.expand_1x1 = (
            None
            if config.first_layer_is_expansion
            else MobileNetV2ConvLayer(config, expanded, expanded, 1)
        )
        self.conv_3x3 = MobileNetV2ConvLayer(config, expanded, expanded, 3, groups=expanded)
        self.reduce_1x1 = MobileNetV2ConvLayer(config, expanded, out_ch, 1, act=False)

    def forward(self, op, x):
        x = self.first_conv(op, x)
        if self.expand_1x1 is not None:
            x = self.expand_1x1(op, x)
        return self.reduce_1x1(op, self.conv_3x3(op, x))


class MobileNetV2Model(nn.Module):
    def __init__(self, config: MobileNetV2Config) -> None:
        super().__init__()
        self.conv_stem = MobileNetV2Stem(config)
        self.layer = Sequential(
            [MobileNetV2InvertedResidual(config, *block) for block in config.blocks()]
        )
        self.conv_1x1 = MobileNetV2ConvLayer(
            config, config.depth(CHANNELS[-1]), config.output_channels, 1
        )

    def forward(self, op, pixel_values):
        x = self.conv_1x1(op, self.layer(op, self.conv_stem(op, pixel_values)))
        return x, op.Flatten(global_average_pool(op, x), axis=1)


class MobileNetV2ForImageClassification(ConvNetForImageClassification):
    config_class = MobileNetV2Config
    model_class = MobileNetV2Model
    base_model_prefix = "mobilenet_v2"

    def make_classifier(self, config) -> nn.Module:
        return Linear(config.output_channels, config.num_labels, bias=True)

    def output_shapes(self) -> dict[str, list]:
        c = self.config
        h, w = c.image_size
        for s in [2] + [block[2] for block in c.blocks()]:
            h, w = same_size(h, s), same_size(w, s)
        return {
            "last_hidden_state": ["batch", c.output_channels, h, w],
            "pooler_output": ["batch", c.output_channels],
            "logits": ["batch", c.num_labels],
        }


MODEL_TYPES = {"mobilenet_v2": MobileNetV2ForImageClassification}
