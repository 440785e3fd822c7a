"""UperNet: a registered backbone's feature maps, a pyramid-pooling module on the last, an
FPN over them all, and a per-position classifier, upsampled to the image.

The module tree follows ``UperNetForSemanticSegmentation`` checkpoints: ``backbone.*`` is
the ``backbone_class`` of the family ``backbone_config`` names (ConvNeXt's, Swin's:
:mod:`mobius_vision.models._backbone`), ``decode_head.psp_modules.{i}.1`` the pooling
branches (adaptive average pool, 1x1 conv, BatchNorm, ReLU), ``decode_head.bottleneck``,
``lateral_convs``, ``fpn_convs``, ``fpn_bottleneck`` and ``classifier``. The auxiliary FCN
head only adds a training loss: its weights are left unread. ``logits`` are
``[batch, num_labels, height, width]`` at the input's size, as transformers returns them.
A checkpoint whose backbone is a timm model (``use_timm_backbone``) or named only by
``backbone`` (no ``backbone_config``) is refused: mobius does not map timm's weights.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.errors import ConfigError
from mobius.model import Model
from mobius_vision.config import image_size_pair
from mobius_vision.models._backbone import backbone
from mobius_vision.models._backbone_config import backbone_config
from mobius_vision.models._conv import BATCHNORM_COUNTERS, BatchNorm2d, Conv2d, Sequential
from mobius_vision.models.mobilevit import resize
from mobius_vision.models.pvt_v2 import adaptive_average_pool


@dataclass
class UperNetConfig:
    model_type: str
    backbone_type: str
    backbone: Any  # the backbone family's own config (with out_features)
    image_size: tuple[int, int]
    num_channels: int = 3
    num_labels: int = 2
    hidden_size: int = 512
    pool_scales: tuple[int, ...] = (1, 2, 3, 6)

    @classmethod
    def from_hf(cls, hf_config: Any) -> UperNetConfig:
        """Normalise a transformers ``UperNetConfig``; the backbone's through its family."""
        t = hf_config.model_type
        hf_backbone = getattr(hf_config, "backbone_config", None)
        timm = getattr(hf_backbone, "model_type", None) == "timm_backbone"
        if timm or getattr(hf_config, "use_timm_backbone", False) or hf_backbone is None:
            raise ConfigError(
                f"{t}: the backbone is a timm or named checkpoint (no backbone_config), whose "
                "weights mobius does not map; use a checkpoint with a transformers backbone_config"
            )
        scales = tuple(hf_config.pool_scales)
        if not scales or not all(isinstance(s, int) and s > 0 for s in scales):
            raise ConfigError(f"{t}: pool_scales {scales!r} must be positive ints")
        inner = backbone_config(hf_backbone)
        return cls(
            model_type=t,
            backbone_type=hf_backbone.model_type,
            backbone=inner,
            image_size=tuple(inner.image_size),
            num_channels=inner.num_channels,
            num_labels=int(hf_config.num_labels),
            hidden_size=int(hf_config.hidden_size),
            pool_scales=scales,
        )

    def with_image_size(self, size: tuple[int, int]) -> UperNetConfig:
        """The config built for ``size``: the backbone's grids follow it."""
        size = image_size_pair(size)
        inner = dataclasses.replace(self.backbone, image_size=size)
        return dataclasses.replace(self, image_size=size, backbone=inner)


class UperNetConvModule(nn.Module):
    """Conv (no bias), BatchNorm, ReLU."""

    norm_name = "batch_norm"  # the checkpoint's name of the BatchNorm

    def __init__(self, in_channels: int, out_channels: int, kernel: int, padding: int = 0) -> None:
        super().__init__()
        self.conv = Conv2d(in_channels, out_channels, kernel, padding=padding, bias=False)
        setattr(self, self.norm_name, BatchNorm2d(out_channels))

    def forward(self, op, x):
        return op.Relu(getattr(self, self.norm_name)(op, self.conv(op, x)))


class AdaptiveAveragePool(nn.Module):
    """``nn.AdaptiveAvgPool2d(scale)`` of a ``[batch, C, h, w]`` map of a known grid."""

    def __init__(self, scale: int, grid: tuple[int, int]) -> None:
        super().__init__()
        self.scale, self.grid = scale, grid

    def forward(self, op, x):
        return adaptive_average_pool(op, x, *self.grid, self.scale)


class UperNetPyramidPoolingModule(nn.ModuleList):
    """One branch per pool scale (``{i}.0`` the pool, ``{i}.1`` the conv module), each
    upsampled back to the map's grid."""

    def __init__(self, scales, conv_module, in_channels: int, channels: int, grid) -> None:
        super().__init__(
            [
                Sequential([AdaptiveAveragePool(s, grid), conv_module(in_channels, channels, 1)])
                for s in scales
            ]
        )
        self.grid = grid

    def __call__(self, op, x):
        return self.forward(op, x)

    def forward(self, op, x) -> list:
        return [resize(op, branch(op, x), self.grid) for branch in self]


class UperNetHead(nn.Module):
    """Pyramid pooling on the last map, an FPN over all of them, a 1x1 classifier at the
    first map's grid. ``config`` gives ``hidden_size``, ``pool_scales`` and ``num_labels``."""

    conv_module = UperNetConvModule

    def __init__(self, config, channels: list[int], grids: list) -> None:
        super().__init__()
        d, scales, conv = config.hidden_size, config.pool_scales, self.conv_module
        self.psp_modules = UperNetPyramidPoolingModule(scales, conv, channels[-1], d, grids[-1])
        self.bottleneck = conv(channels[-1] + len(scales) * d, d, 3, padding=1)
        self.lateral_convs = nn.ModuleList([conv(c, d, 1) for c in channels[:-1]])
        self.fpn_convs = nn.ModuleList([conv(d, d, 3, padding=1) for _ in channels[:-1]])
        self.fpn_bottleneck = conv(len(channels) * d, d, 3, padding=1)
        self.classifier = Conv2d(d, config.num_labels, 1)
        self.grids = grids

    def forward(self, op, maps):
        top = maps[-1]
        laterals = [conv(op, x) for conv, x in zip(self.lateral_convs, maps, strict=False)]
        laterals.append(self.bottleneck(op, op.Concat(top, *self.psp_modules(op, top), axis=1)))
        for i in range(len(laterals) - 1, 0, -1):  # top-down: each level gets the one above
            laterals[i - 1] = op.Add(laterals[i - 1], resize(op, laterals[i], self.grids[i - 1]))
        outs = [conv(op, x) for conv, x in zip(self.fpn_convs, laterals, strict=False)]
        outs.append(laterals[-1])
        outs = [outs[0], *(resize(op, x, self.grids[0]) for x in outs[1:])]
        return self.classifier(op, self.fpn_bottleneck(op, op.Concat(*outs, axis=1)))


class UperNetForSemanticSegmentation(Model):
    """``pixel_values`` -> ``logits`` ``[batch, num_labels, height, width]``."""

    config_class = UperNetConfig
    task = "semantic-segmentation"

    def __init__(self, config: UperNetConfig) -> None:
        super().__init__()
        self.config = config
        self.backbone = backbone(config.backbone_type, config.backbone)
        inner = config.backbone
        self.decode_head = UperNetHead(config, inner.feature_channels(), inner.feature_grids())

    @property
    def ignored(self) -> tuple[str, ...]:
        """The auxiliary head (a training loss), BatchNorm counters, the backbone's own."""
        own = tuple(f"backbone.{pattern}" for pattern in getattr(self.backbone, "ignored", ()))
        return ("auxiliary_head.*", BATCHNORM_COUNTERS, *own)

    def output_shapes(self) -> dict[str, list]:
        return {"logits": ["batch", self.config.num_labels, *self.config.image_size]}

    def forward(self, op, pixel_values):
        logits = self.decode_head(op, self.backbone(op, pixel_values))
        return {"logits": resize(op, logits, self.config.image_size)}


MODEL_TYPES = {"upernet": UperNetForSemanticSegmentation}
