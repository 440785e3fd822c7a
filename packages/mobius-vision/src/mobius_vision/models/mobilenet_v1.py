"""MobileNetV1: a strided 3x3 stem, 13 depthwise-separable pairs (depthwise 3x3, pointwise 1x1),
average pool.

The conv layers are MobileNetV2's (TF SAME padding by default, BatchNorm, relu6). The module
tree follows ``MobileNetV1For*`` checkpoints (``mobilenet_v1.conv_stem``,
``mobilenet_v1.layer.0`` ... ``layer.25``, ``classifier``); ``pooler_output`` is ``[batch, C]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Linear
from mobius_vision.config import VisionConfig
from mobius_vision.models._conv import (
    ConvNetForImageClassification,
    Sequential,
    global_average_pool,
    same_size,
)
from mobius_vision.models.mobilenet_v2 import MobileNetV2ConvLayer

STRIDES = [1, 2, 1, 2, 1, 2, 1, 1, 1, 1, 1, 2, 1]


@dataclass
class MobileNetV1Config(VisionConfig):
    depth_multiplier: float = 1.0
    min_depth: int = 8
    hidden_act: str = "relu6"
    tf_padding: bool = True
    layer_norm_eps: float = 1e-3

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        names = [f for f in cls.__dataclass_fields__ if f not in VisionConfig.__dataclass_fields__]
        return dict(super().hf_fields(hf_config), **{n: getattr(hf_config, n) for n in names})

    def depth(self, channels: int) -> int:
        return max(int(channels * self.depth_multiplier), self.min_depth)

    def pairs(self) -> list[tuple[int, int, int]]:
        """``(in, out, stride)`` of each depthwise-separable pair."""
        depth, out_ch, pairs = 32, self.depth(32), []
        for i, stride in enumerate(STRIDES):
            in_ch = out_ch
            if stride == 2 or i == 0:
                depth *= 2
                out_ch = self.depth(depth)
            pairs.append((in_ch, out_ch, stride))
        return pairs


class MobileNetV1Model(nn.Module):
    def __init__(self, config: MobileNetV1Config) -> None:
        super().__init__()
        self.conv_stem = MobileNetV2ConvLayer(config, config.num_channels, config.depth(32), 3, 2)
        layers = []
        for in_ch, out_ch, stride in config.pairs():
            layers.append(MobileNetV2ConvLayer(config, in_ch, in_ch, 3, stride, groups=in_ch))
            layers.append(MobileNetV2ConvLayer(config, in_ch, out_ch, 1))
        self.layer = Sequential(layers)

    def forward(self, op, pixel_values):
        x = self.layer(op, self.conv_stem(op, pixel_values))
        return x, op.Flatten(global_average_pool(op, x), axis=1)


class MobileNetV1ForImageClassification(ConvNetForImageClassification):
    config_class = MobileNetV1Config
    model_class = MobileNetV1Model
    base_model_prefix = "mobilenet_v1"

    @property
    def hidden_size(self) -> int:
        return self.config.pairs()[-1][1]

    def make_classifier(self, config) -> nn.Module:
        return Linear(config.pairs()[-1][1], config.num_labels, bias=True)

    def output_shapes(self) -> dict[str, list]:
        c = self.config
        h, w = c.image_size
        for s in [2, *STRIDES]:
            h, w = same_size(h, s), same_size(w, s)
        return {
            "last_hidden_state": ["batch", self.hidden_size, h, w],
            "pooler_output": ["batch", self.hidden_size],
            "logits": ["batch", c.num_labels],
        }


MODEL_TYPES = {"mobilenet_v1": MobileNetV1ForImageClassification}
