"""RT-DETR's ResNet-vd: ResNet with a three-conv 3x3 stem and average-pooled shortcuts.

The differences from :mod:`.resnet` (transformers' ``RTDetrResNet*``): the stem is three
3x3 conv layers (``embedder.embedder.0..2``); a shortcut that halves the map average-pools
it first (2x2, ``ceil_mode``) and projects with a stride-1 1x1 conv
(``shortcut.1``); a basic stage's first layer always projects its shortcut.
:class:`RTDetrResNetBackbone` is what RT-DETR (and its v2) puts under its encoder
(:mod:`._backbone`); on its own the family builds as a feature extractor
(``last_hidden_state``, ``pooler_output``), as transformers has no classifier for it.
"""

from __future__ import annotations

from onnxscript import nn

from mobius_vision.models._conv import Identity, Sequential, activation
from mobius_vision.models.resnet import (
    ResNetBackbone,
    ResNetBackboneConfig,
    ResNetConvLayer,
    ResNetEncoder,
    ResNetForImageClassification,
    ResNetModel,
    ResNetShortCut,
    ResNetStage,
)


class AveragePool(nn.Module):
    """``nn.AvgPool2d(2, 2, 0, ceil_mode=True)``: a partial window at the edge averages what it
    covers."""

    def forward(self, op, x):
        return op.AveragePool(x, kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)


def pooled_shortcut(in_ch: int, out_ch: int, project: bool) -> Sequential:
    """Average-pool, then (when ``project``) a stride-1 1x1 projection: ``shortcut.0`` / ``.1``."""
    return Sequential([AveragePool(), ResNetShortCut(in_ch, out_ch, 1) if project else Identity()])


class RTDetrResNetEmbeddings(nn.Module):
    """Three 3x3 conv layers (the first strided, to half then all of ``embedding_size``), then a
    3x3 stride-2 max pool."""

    def __init__(self, config: ResNetBackboneConfig) -> None:
        super().__init__()
        half = config.embedding_size // 2
        act = config.hidden_act
        self.embedder = Sequential(
            [
                ResNetConvLayer(config.num_channels, half, 3, 2, act),
                ResNetConvLayer(half, half, 3, 1, act),
                ResNetConvLayer(half, config.embedding_size, 3, 1, act),
            ]
        )

    def forward(self, op, x):
        x = self.embedder(op, x)
        return op.MaxPool(x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])


class RTDetrResNetBasicLayer(nn.Module):
    """Two 3x3 conv layers; the first layer of a stage projects its shortcut (pooled when the
    channels change), the others add the input."""

    def __init__(self, config, in_ch: int, out_ch: int, stride: int = 1, first: bool = False):
        super().__init__()
        if not first:
            self.shortcut = None
        elif in_ch != out_ch:
            self.shortcut = pooled_shortcut(in_ch, out_ch, project=True)
        else:
            self.shortcut = ResNetShortCut(in_ch, out_ch, stride)
        self.layer = Sequential(
            [
                ResNetConvLayer(in_ch, out_ch, stride=stride),
                ResNetConvLayer(out_ch, out_ch, act=None),
            ]
        )
        self.act = activation(config.hidden_act)

    def forward(self, op, x):
        residual = x if self.shortcut is None else self.shortcut(op, x)
        return self.act(op, op.Add(self.layer(op, x), residual))


class RTDetrResNetBottleNeckLayer(RTDetrResNetBasicLayer):
    """1x1 reduce (by 4), 3x3, 1x1 expand; a halving shortcut is pooled, then projected where
    the channels change."""

    def __init__(self, config, in_ch: int, out_ch: int, stride: int = 1, first: bool = False):
        nn.Module.__init__(self)
        project = in_ch != out_ch or stride != 1
        if stride == 2:
            self.shortcut = pooled_shortcut(in_ch, out_ch, project)
        else:
            self.shortcut = ResNetShortCut(in_ch, out_ch, stride) if project else None
        reduced = out_ch // 4
        in_first = config.downsample_in_bottleneck
        self.layer = Sequential(
            [
                ResNetConvLayer(in_ch, reduced, kernel_size=1, stride=stride if in_first else 1),
                ResNetConvLayer(reduced, reduced, stride=1 if in_first else stride),
                ResNetConvLayer(reduced, out_ch, kernel_size=1, act=None),
            ]
        )
        self.act = activation(config.hidden_act)


class RTDetrResNetStage(ResNetStage):
    def __init__(self, config, in_ch: int, out_ch: int, stride: int, depth: int):
        nn.Module.__init__(self)
        layer = (
            RTDetrResNetBottleNeckLayer
            if config.layer_type == "bottleneck"
            else RTDetrResNetBasicLayer
        )
        self.layers = Sequential(
            [layer(config, in_ch, out_ch, stride, first=True)]
            + [layer(config, out_ch, out_ch) for _ in range(depth - 1)]
        )


class RTDetrResNetEncoder(ResNetEncoder):
    stage_class = RTDetrResNetStage


class RTDetrResNetModel(ResNetModel):
    embeddings_class = RTDetrResNetEmbeddings
    encoder_class = RTDetrResNetEncoder


class RTDetrResNetBackbone(ResNetBackbone):
    """transformers' ``RTDetrResNetBackbone``: the maps ``out_features`` names."""

    embeddings_class = RTDetrResNetEmbeddings
    encoder_class = RTDetrResNetEncoder


class RTDetrResNetFeatures(ResNetForImageClassification):
    """The backbone alone, as a feature extractor (transformers has no classifier for it)."""

    model_class = RTDetrResNetModel
    backbone_class = RTDetrResNetBackbone


MODEL_TYPES = {"rt_detr_resnet": RTDetrResNetFeatures}
