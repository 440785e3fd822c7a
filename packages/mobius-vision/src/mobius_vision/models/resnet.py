"""ResNet: a 7x7 stem and max pool, stages of basic or bottleneck residual layers, average pool.

The module tree follows ``ResNetFor*`` checkpoints (``resnet.embedder.embedder.convolution``,
``resnet.encoder.stages.0.layers.0.layer.1.normalization``..., ``classifier.1``);
a bare ``ResNetModel`` checkpoint gets the ``resnet.`` prefix. ``last_hidden_state``
is ``[batch, C, h, w]`` and ``pooler_output`` ``[batch, C, 1, 1]``, as transformers returns them.

:class:`ResNetBackbone` is transformers' ``ResNetBackbone`` under a dense head (DETR's
``backbone_config``): the stem's and stages' maps that ``out_features`` names, at any
image size. The timm ResNets that DETR checkpoints name (``use_timm_backbone``:
``resnet18`` to ``resnet152``) are the same networks under other names:
:meth:`ResNetBackboneConfig.from_timm` and :func:`timm_to_transformers_name` map them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.errors import ConfigError
from mobius_vision.config import VisionConfig
from mobius_vision.models._backbone import staged_feature_maps
from mobius_vision.models._conv import (
    BATCHNORM_COUNTERS,
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


def stage_names(stages: int) -> list[str]:
    """transformers' names of a backbone's outputs: ``stem``, then ``stage1``..."""
    return ["stem", *(f"stage{i}" for i in range(1, stages + 1))]


@dataclass
class ResNetBackboneConfig(ResNetConfig):
    """ResNet as a backbone: the maps it returns, by transformers' stage names
    (``stem``, ``stage1``...), in that order."""

    out_features: tuple[str, ...] = ()

    def feature_channels(self) -> list[int]:
        """The channels of each returned map."""
        names = stage_names(len(self.depths))
        channels = dict(zip(names, [self.embedding_size, *self.hidden_sizes], strict=True))
        return [channels[name] for name in self.out_features]

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        names = stage_names(len(fields["depths"]))
        out_features = getattr(hf_config, "out_features", None) or names[-1:]
        if not isinstance(out_features, (list, tuple)) or not all(
            name in names for name in out_features
        ):
            raise ConfigError(
                f"resnet backbone: out_features {out_features!r} must name stages of {names}"
            )
        return dict(fields, out_features=tuple(out_features))

    @classmethod
    def from_timm(cls, timm_config: Any) -> ResNetBackboneConfig:
        """The config of a timm ResNet backbone (transformers' ``TimmBackboneConfig``:
        ``backbone`` names it, ``out_indices`` counts its stages from 1)."""
        name = getattr(timm_config, "backbone", None)
        if name not in TIMM_RESNETS:
            raise ConfigError(
                f"timm backbone {name!r} is not one mobius maps (it maps {', '.join(TIMM_RESNETS)})"
            )
        if getattr(timm_config, "output_stride", None) not in (None, 32):
            raise ConfigError(f"timm backbone {name} with a dilated last stage is not supported")
        layer_type, depths = TIMM_RESNETS[name]
        widths = (64, 128, 256, 512) if layer_type == "basic" else (256, 512, 1024, 2048)
        indices = getattr(timm_config, "out_indices", None) or [4]
        if not all(isinstance(i, int) and 0 <= i <= 4 for i in indices):
            raise ConfigError(f"timm backbone out_indices {indices!r} must be stages 0 to 4")
        return cls(
            model_type="resnet",
            image_size=(224, 224),
            num_channels=int(getattr(timm_config, "num_channels", 3)),
            embedding_size=64,
            hidden_sizes=widths,
            depths=depths,
            layer_type=layer_type,
            out_features=tuple(stage_names(4)[i] for i in indices),
        )


#: timm's plain ResNets: (layer type, blocks per stage). Their stride sits on the 3x3 conv,
#: as in transformers' ResNet (``downsample_in_bottleneck`` false).
TIMM_RESNETS = {
    "resnet18": ("basic", (2, 2, 2, 2)),
    "resnet34": ("basic", (3, 4, 6, 3)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)),
    "resnet101": ("bottleneck", (3, 4, 23, 3)),
    "resnet152": ("bottleneck", (3, 8, 36, 3)),
}
#: timm's stem, and its block parts: ``layer2.0.conv1.`` / ``bn1.`` / ``downsample.0.``.
_TIMM_STEM = {
    "conv1.": "embedder.embedder.convolution.",
    "bn1.": "embedder.embedder.normalization.",
}
_TIMM_BLOCK = re.compile(r"^layer(\d+)\.(\d+)\.(conv|bn|downsample\.)(\d)\.(.+)$")


def timm_to_transformers_name(name: str) -> str:
    """A timm ResNet tensor name (``layer1.0.conv2.weight``) as transformers' ResNet names it
    (``encoder.stages.0.layers.0.layer.1.convolution.weight``); others are returned as they are."""
    for timm, ours in _TIMM_STEM.items():
        if name.startswith(timm):
            return ours + name[len(timm) :]
    match = _TIMM_BLOCK.match(name)
    if match is None:
        return name
    stage, block, kind, index, rest = match.groups()
    if kind == "downsample.":  # a 1x1 strided conv (0), then its BatchNorm (1)
        part = "shortcut." + ("convolution" if index == "0" else "normalization")
    else:  # convN / bnN: the Nth conv layer of the residual branch
        part = f"layer.{int(index) - 1}." + ("convolution" if kind == "conv" else "normalization")
    return f"encoder.stages.{int(stage) - 1}.layers.{block}.{part}.{rest}"


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


class ResNetBackbone(ResNetModel):
    """transformers' ``ResNetBackbone``: ``feature_maps``, one per ``out_features`` entry
    (``stem`` is the max-pooled stem, ``stageN`` the output of stage N)."""

    config_class = ResNetBackboneConfig
    #: Checkpoint tensors no graph reads: BatchNorm's step counters.
    ignored = (BATCHNORM_COUNTERS,)

    def __init__(self, config: ResNetBackboneConfig) -> None:
        super().__init__(config)
        self.config = config

    def forward(self, op, pixel_values) -> list:
        return staged_feature_maps(op, self, pixel_values, self.config.out_features)


class ResNetForImageClassification(ConvNetForImageClassification):
    config_class = ResNetConfig
    model_class = ResNetModel
    base_model_prefix = "resnet"

    stem_strides = (2, 2)  # stem conv, max pool
    #: What a dense head (DETR) puts under itself (:mod:`._backbone`).
    backbone_class = ResNetBackbone

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
