"""ResNet: a 7x7 stem and max pool, stages of basic or bottleneck residual layers, average pool.

The module tree follows ``ResNetFor*`` checkpoints (``resnet.embedder.embedder.convolution``,
``resnet.encoder.stages.0.layers.0.layer.1.normalization``..., ``classifier.1``);
a bare ``ResNetModel`` checkpoint gets the ``resnet.`` prefix. ``last_hidden_state``
is ``[batch, C, h, w]`` and ``pooler_output`` ``[batch, C, 1, 1]``, as transformers returns them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.errors import ConfigError
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


@dataclass
class ResNetConfig(VisionConfig):
    embedding_size: int = 64
    hidden_sizes: tuple[int, ...] = (256, 512, 1024, 2048)
    depths: tuple[int, ...] = (3, 4, 6, 3)
    layer_type: str = "bottleneck"
    hidden_act: str = "relu"
    downsample_in_first_stage: bool = False
    downsample_in_bottleneck: bool = False

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        layer_type = hf_config.layer_type
        if layer_type not in ("basic", "bottleneck"):
            raise ConfigError(f"resnet layer_type {layer_type!r} is not basic or bottleneck")
        return dict(
            super().hf_fields(hf_config),
            embedding_size=hf_config.embedding_size,
            hidden_sizes=tuple(hf_config.hidden_sizes),
            depths=tuple(hf_config.depths),
            layer_type=layer_type,
            hidden_act=hf_config.hidden_act,
            downsample_in_first_stage=bool(hf_config.downsample_in_first_stage),
            downsample_in_bottleneck=bool(getattr(hf_config, "downsample_in_bottleneck", False)),
        )

    def stage_strides(self) -> list[int]:
        first = 2 if self.downsample_in_first_stage else 1
        return [first] + [2] * (len(self.depths) - 1)


class ResNetConvLayer(nn.Module):
    """Conv (``k // 2`` padding, no bias), BatchNorm, activation."""

    def __init__(
        self, in_ch, out_ch, kernel_size=3, stride=1, act: str | None = "relu", groups: int = 1
    ) -> None:
        super().__init__()
        pad = kernel_size // 2
        self.convolution = Conv2d(
            in_ch, out_ch, kernel_size, stride, pad, groups=groups, bias=False
        )
        self.normalization = BatchNorm2d(out_ch)
        self.act = activation(act)

    def forward(self, op, x):
        return self.act(op, self.normalization(op, self.convolution(op, x)))


class ResNetShortCut(ResNetConvLayer):
    """1x1 strided projection of the residual, BatchNorm, no activation."""

    def __init__(self, in_ch: int, out_ch: int, stride: int) -> None:
        super().__init__(in_ch, out_ch, kernel_size=1, stride=stride, act=None)


class ResNetEmbeddings(nn.Module):
    def __init__(self, config: ResNetConfig) -> None:
        super().__init__()
        self.embedder = ResNetConvLayer(
            config.num_channels, config.embedding_size, 7, 2, config.hidden_act
        )

    def forward(self, op, x):
        x = self.embedder(op, x)
        return op.MaxPool(x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])


class ResNetBasicLayer(nn.Module):
    def __init__(self, config: ResNetConfig, in_ch: int, out_ch: int, stride: int = 1) -> None:
        super().__init__()
        needs_shortcut = in_ch != out_ch or stride != 1
        self.shortcut = ResNetShortCut(in_ch, out_ch, stride) if needs_shortcut else None
        self.layer = self.residual_branch(config, in_ch, out_ch, stride)
        self.act = activation(config.hidden_act)

    def residual_branch(self, config, in_ch, out_ch, stride) -> Sequential:
        return Sequential(
            [
                ResNetConvLayer(in_ch, out_ch, stride=stride),
                ResNetConvLayer(out_ch, out_ch, act=None),
            ]
        )

    def forward(self, op, x):
        residual = x if self.shortcut is None else self.shortcut(op, x)
        return self.act(op, op.Add(self.layer(op, x), residual))


class ResNetBottleNeckLayer(ResNetBasicLayer):
    """1x1 reduce (by 4), 3x3, 1x1 expand; the stride on the 1x1 with ``downsample_in_bottleneck``."""

    def residual_branch(self, config, in_ch, out_ch, stride) -> Sequential:
        reduced = out_ch // 4
        first = config.downsample_in_bottleneck
        return Sequential(
            [
                ResNetConvLayer(in_ch, reduced, kernel_size=1, stride=stride if first else 1),
                ResNetConvLayer(reduced, reduced, stride=1 if first else stride),
                ResNetConvLayer(reduced, out_ch, kernel_size=1, act=None),
            ]
        )


class ResNetStage(nn.Module):
    def __init__(self, config: ResNetConfig, in_ch: int, out_ch: int, stride: int, depth: int):
        super().__init__()
        layer = self.layer_class(config)
        self.layers = Sequential(
            [layer(config, in_ch, out_ch, stride)]
            + [layer(config, out_ch, out_ch) for _ in range(depth - 1)]
        )

    @staticmethod
    def layer_class(config: ResNetConfig) -> type:
        return ResNetBottleNeckLayer if config.layer_type == "bottleneck" else ResNetBasicLayer

    def forward(self, op, x):
        return self.layers(op, x)


class ResNetEncoder(nn.Module):
    stage_class = ResNetStage

    def __init__(self, config: ResNetConfig) -> None:
        super().__init__()
        ins = [config.embedding_size, *config.hidden_sizes[:-1]]
        self.stages = Sequential(
            [
                self.stage_class(config, i, o, s, d)
                for i, o, s, d in zip(
                    ins, config.hidden_sizes, config.stage_strides(), config.depths, strict=True
                )
            ]
        )

    def forward(self, op, x):
        return self.stages(op, x)


class ResNetModel(nn.Module):
    embeddings_class = ResNetEmbeddings
    encoder_class = ResNetEncoder

    def __init__(self, config: ResNetConfig) -> None:
        super().__init__()
        self.embedder = self.embeddings_class(config)
        self.encoder = self.encoder_class(config)

    def forward(self, op, pixel_values):
        x = self.encoder(op, self.embedder(op, pixel_values))
        return x, global_average_pool(op, x)


class ResNetForImageClassification(ConvNetForImageClassification):
    config_class = ResNetConfig
    model_class = ResNetModel
    base_model_prefix = "resnet"

    stem_strides = (2, 2)  # stem conv, max pool

    def output_shapes(self) -> dict[str, list]:
        c = self.config
        h, w = c.image_size
        for s in [*self.stem_strides, *c.stage_strides()]:
            h, w = same_size(h, s), same_size(w, s)
        return {
            "last_hidden_state": ["batch", c.hidden_sizes[-1], h, w],
            "pooler_output": ["batch", c.hidden_sizes[-1], 1, 1],
            "logits": ["batch", c.num_labels],
        }


MODEL_TYPES = {"resnet": ResNetForImageClassification}
