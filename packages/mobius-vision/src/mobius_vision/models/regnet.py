"""RegNet: a 3x3 stem, stages of X layers (1x1, grouped 3x3, 1x1) or Y layers (X with
squeeze-and-excitation), average pool: ResNet's skeleton with other residual branches.

Checkpoint keys are ResNet's under ``regnet.`` (``...layers.0.layer.2.attention.0`` is
the Y layer's SE reduction); ``pooler_output`` is ``[batch, C, 1, 1]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.errors import ConfigError
from mobius_vision.models._conv import Activation, Conv2d, Sequential, global_average_pool
from mobius_vision.models.resnet import (
    ResNetBasicLayer,
    ResNetConfig,
    ResNetConvLayer,
    ResNetEncoder,
    ResNetForImageClassification,
    ResNetModel,
    ResNetStage,
)


@dataclass
class RegNetConfig(ResNetConfig):
    embedding_size: int = 32
    groups_width: int = 64
    layer_type: str = "y"
    downsample_in_first_stage: bool = True

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if hf_config.layer_type not in ("x", "y"):
            raise ConfigError(f"regnet layer_type {hf_config.layer_type!r} is not x or y")
        return dict(
            super(ResNetConfig, cls).hf_fields(hf_config),
            embedding_size=hf_config.embedding_size,
            hidden_sizes=tuple(hf_config.hidden_sizes),
            depths=tuple(hf_config.depths),
            groups_width=hf_config.groups_width,
            layer_type=hf_config.layer_type,
            hidden_act=hf_config.hidden_act,
            downsample_in_first_stage=bool(hf_config.downsample_in_first_stage),
        )


class RegNetEmbeddings(nn.Module):
    def __init__(self, config: RegNetConfig) -> None:
        super().__init__()
        self.embedder = ResNetConvLayer(
            config.num_channels, config.embedding_size, 3, 2, config.hidden_act
        )

    def forward(self, op, x):
        return self.embedder(op, x)


class RegNetSELayer(nn.Module):
    """``x * sigmoid(conv(relu(conv(mean(x)))))``."""

    def __init__(self, channels: int, reduced: int) -> None:
        super().__init__()
        self.attention = Sequential(
            [
                Conv2d(channels, reduced, 1),
                Activation("relu"),
                Conv2d(reduced, channels, 1),
                Activation("sigmoid"),
            ]
        )

    def forward(self, op, x):
        return op.Mul(x, self.attention(op, global_average_pool(op, x)))


class RegNetXLayer(ResNetBasicLayer):
    def residual_branch(self, config, in_ch, out_ch, stride) -> Sequential:
        act, groups = config.hidden_act, max(1, out_ch // config.groups_width)
        return Sequential(
            [
                ResNetConvLayer(in_ch, out_ch, kernel_size=1, act=act),
                ResNetConvLayer(out_ch, out_ch, stride=stride, act=act, groups=groups),
                *self.squeeze_excitation(in_ch, out_ch),
                ResNetConvLayer(out_ch, out_ch, kernel_size=1, act=None),
            ]
        )

    def squeeze_excitation(self, in_ch: int, out_ch: int) -> list:
        return []


class RegNetYLayer(RegNetXLayer):
    def squeeze_excitation(self, in_ch: int, out_ch: int) -> list:
        return [RegNetSELayer(out_ch, int(round(in_ch / 4)))]


class RegNetStage(ResNetStage):
    @staticmethod
    def layer_class(config: RegNetConfig) -> type:
        return RegNetXLayer if config.layer_type == "x" else RegNetYLayer


class RegNetEncoder(ResNetEncoder):
    stage_class = RegNetStage


class RegNetModel(ResNetModel):
    embeddings_class = RegNetEmbeddings
    encoder_class = RegNetEncoder


class RegNetForImageClassification(ResNetForImageClassification):
    config_class = RegNetConfig
    model_class = RegNetModel
    base_model_prefix = "regnet"
    stem_strides = (2,)


MODEL_TYPES = {"regnet": RegNetForImageClassification}
