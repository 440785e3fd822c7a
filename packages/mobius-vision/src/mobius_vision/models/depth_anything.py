"""Depth Anything (v1 and v2): a DINOv2 backbone, a DPT-style neck and a small depth head.

Checkpoint keys as transformers saves ``DepthAnythingForDepthEstimation``
(``backbone.encoder.layer.0...``, ``neck.reassemble_stage.layers.0.projection``,
``head.conv1``). The backbone is whatever mobius registers for
``backbone_config.model_type`` (DINOv2's :class:`~mobius_vision.models.dinov2.Dinov2Backbone`),
returning token sequences (``reshape_hidden_states`` false). v2 differs from v1 by its
config only. The head upsamples to ``patch_size`` times the patch grid, ends in a ReLU
(``relative``) or a sigmoid (``metric``) and scales by ``max_depth``. Any image size
whose sides are multiples of the patch size runs: the positions are interpolated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Conv2d
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_vision.models._backbone import backbone
from mobius_vision.models._dpt_neck import (
    DptStyleNeck,
    backbone_config,
    reassemble_factors,
    resize_to,
)
from mobius_vision.models.dinov2 import patch_grid

DEPTH_TYPES = ("relative", "metric")


@dataclass
class DepthAnythingConfig:
    model_type: str
    backbone_type: str
    backbone: Any  # the backbone family's own config
    patch_size: int
    reassemble_hidden_size: int
    reassemble_factors: tuple[float, ...]
    neck_hidden_sizes: tuple[int, ...]
    fusion_hidden_size: int
    head_in_index: int
    head_hidden_size: int
    depth_estimation_type: str
    max_depth: float
    num_channels: int = 3

    @classmethod
    def from_hf(cls, hf_config: Any) -> DepthAnythingConfig:
        return cls(**cls.hf_fields(hf_config))

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        head = hf_config.model_type
        sub = backbone_config(getattr(hf_config, "backbone_config", None), head)
        if getattr(sub, "reshape_hidden_states", False):
            raise ConfigError(
                f"{head}: its backbone must return token sequences (reshape_hidden_states false)"
            )
        sizes = tuple(int(s) for s in hf_config.neck_hidden_sizes)
        factors = reassemble_factors(hf_config.reassemble_factors, head)
        if len(factors) != len(sizes) or len(sub.out_indices) != len(sizes):
            raise ConfigError(
                f"{head}: {len(sizes)} neck_hidden_sizes, {len(factors)} reassemble_factors and "
                f"{len(sub.out_indices)} backbone out_indices must match"
            )
        kind = hf_config.depth_estimation_type
        if kind not in DEPTH_TYPES:
            raise ConfigError(f"{head}: depth_estimation_type {kind!r} is not one of {DEPTH_TYPES}")
        max_depth = float(hf_config.max_depth if hf_config.max_depth is not None else 1)
        if not math.isfinite(max_depth) or max_depth <= 0:
            raise ConfigError(f"{head}: max_depth must be a positive number, not {max_depth}")
        patch = hf_config.patch_size
        if patch != sub.patch_size:
            raise ConfigError(f"{head}: patch_size {patch} differs from its backbone's")
        return dict(
            model_type=head,
            backbone_type=hf_config.backbone_config.model_type,
            backbone=sub,
            patch_size=int(patch),
            reassemble_hidden_size=int(hf_config.reassemble_hidden_size),
            reassemble_factors=factors,
            neck_hidden_sizes=sizes,
            fusion_hidden_size=int(hf_config.fusion_hidden_size),
            head_in_index=int(hf_config.head_in_index),
            head_hidden_size=int(hf_config.head_hidden_size),
            depth_estimation_type=kind,
            max_depth=max_depth,
            num_channels=sub.num_channels,
        )


class DepthAnythingDepthEstimationHead(nn.Module):
    """``conv1`` -> bilinear to the patch grid times ``patch_size`` -> ``conv2``, ReLU ->
    ``conv3`` -> ReLU (relative) or sigmoid (metric), times ``max_depth``."""

    def __init__(self, config: DepthAnythingConfig) -> None:
        super().__init__()
        features = config.fusion_hidden_size
        self.conv1 = Conv2d(features, features // 2, 3, padding=1)
        self.conv2 = Conv2d(features // 2, config.head_hidden_size, 3, padding=1)
        self.conv3 = Conv2d(config.head_hidden_size, 1, 1)
        self.config = config

    def forward(self, op, fused: list, grid):
        config = self.config
        x = self.conv1(op, fused[config.head_in_index])
        size = op.Mul(grid, op.Constant(value_ints=[config.patch_size]))
        x = op.Relu(self.conv2(op, resize_to(op, x, size, align_corners=True)))
        x = self.conv3(op, x)
        x = op.Relu(x) if config.depth_estimation_type == "relative" else op.Sigmoid(x)
        x = op.Mul(x, op.Constant(value_float=config.max_depth))
        return op.Squeeze(x, op.Constant(value_ints=[1]))  # [batch, height, width]


class DepthAnythingForDepthEstimation(Model):
    """``pixel_values`` [batch, 3, height, width] -> ``predicted_depth`` [batch, height, width]."""

    config_class = DepthAnythingConfig
    task = "depth-estimation"
    #: The graph takes any height and width (multiples of the patch size).
    fixed_image_size = None

    def __init__(self, config: DepthAnythingConfig) -> None:
        super().__init__()
        self.config = config
        self.backbone = backbone(config.backbone_type, config.backbone)
        self.neck = DptStyleNeck(config)
        self.head = DepthAnythingDepthEstimationHead(config)

    @property
    def ignored(self) -> tuple[str, ...]:
        """The backbone's unused tensors, and the coarsest fusion layer's skip unit (no skip)."""
        unused = getattr(self.backbone, "unused", ())
        return (
            *(f"backbone.{name}" for name in unused),
            "neck.fusion_stage.layers.0.residual_layer1.*",
        )

    def output_shapes(self) -> dict[str, list]:
        return {"predicted_depth": ["batch", "depth_height", "depth_width"]}

    def forward(self, op, pixel_values):
        grid = patch_grid(op, pixel_values, self.config.patch_size)
        fused = self.neck(op, self.backbone(op, pixel_values), grid)
        return {"predicted_depth": self.head(op, fused, grid)}


MODEL_TYPES = {"depth_anything": DepthAnythingForDepthEstimation}
