"""Prompt Depth Anything: Depth Anything steered by a low-resolution metric depth (a "prompt").

The graph takes ``prompt_depth`` [batch, 1, prompt_height, prompt_width] beside the
pixels (:mod:`mobius_vision.tasks.depth_estimation`). Each image's prompt is scaled to
[0, 1] by its own min and max; every fusion layer adds a small conv stack
(``prompt_depth_layer``) over the prompt resized to its map, and the head's output is
mapped back to the prompt's range, so the depth is metric. The head does not scale by
``max_depth``. Otherwise Depth Anything (:mod:`.depth_anything`), same checkpoint keys.
"""

from __future__ import annotations

from typing import Any

from onnxscript import nn

from mobius.components import Conv2d
from mobius_vision.models._dpt_neck import (
    DptStyleNeck,
    FeatureFusionLayer,
    FeatureFusionStage,
    resize_to,
)
from mobius_vision.models.depth_anything import (
    DepthAnythingConfig,
    DepthAnythingForDepthEstimation,
)
from mobius_vision.models.dinov2 import patch_grid


class PromptDepthAnythingConfig(DepthAnythingConfig):
    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        # Its head reads the last fused map and does not scale (a scale of 1 is exact).
        return dict(super().hf_fields(hf_config), head_in_index=-1, max_depth=1.0)


class PromptDepthAnythingLayer(nn.Module):
    """``conv3(relu(conv2(relu(conv1(prompt)))))``, 3x3 convs from 1 channel."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.convolution1 = Conv2d(1, channels, 3, padding=1)
        self.convolution2 = Conv2d(channels, channels, 3, padding=1)
        self.convolution3 = Conv2d(channels, channels, 3, padding=1)

    def forward(self, op, prompt):
        x = op.Relu(self.convolution1(op, prompt))
        return self.convolution3(op, op.Relu(self.convolution2(op, x)))


class PromptFusionLayer(FeatureFusionLayer):
    """A fusion layer that adds the prompt's features, at its map's size, before upsampling."""

    def __init__(self, channels: int, **residual) -> None:
        super().__init__(channels, **residual)
        self.prompt_depth_layer = PromptDepthAnythingLayer(channels)

    def forward(self, op, x, skip=None, size=None, prompt=None):
        x = self.merge(op, x, skip)
        prompt = resize_to(op, prompt, op.Shape(x, start=2, end=4), align_corners=False)
        return self.upsample(op, op.Add(x, self.prompt_depth_layer(op, prompt)), size)


class PromptFusionStage(FeatureFusionStage):
    layer_class = PromptFusionLayer


class PromptDepthAnythingNeck(DptStyleNeck):
    fusion_class = PromptFusionStage


class PromptDepthAnythingForDepthEstimation(DepthAnythingForDepthEstimation):
    """``pixel_values`` and ``prompt_depth`` -> metric ``predicted_depth`` [batch, height, width]."""

    config_class = PromptDepthAnythingConfig

    def extra_inputs(self) -> dict:
        """``prompt_depth``, in the build's float type (dtype None)."""
        return {"prompt_depth": (None, ["batch", 1, "prompt_height", "prompt_width"])}

    def __init__(self, config: PromptDepthAnythingConfig) -> None:
        super().__init__(config)
        self.neck = PromptDepthAnythingNeck(config)

    def forward(self, op, pixel_values, prompt_depth):
        axes = op.Constant(value_ints=[1, 2, 3])
        low = op.ReduceMin(prompt_depth, axes, keepdims=1)  # [batch, 1, 1, 1]
        span = op.Sub(op.ReduceMax(prompt_depth, axes, keepdims=1), low)
        prompt = op.Div(op.Sub(prompt_depth, low), span)

        grid = patch_grid(op, pixel_values, self.config.patch_size)
        fused = self.neck(op, self.backbone(op, pixel_values), grid, prompt)
        depth = self.head(op, fused, grid)  # [batch, height, width], in [0, 1]-ish
        squeeze = op.Constant(value_ints=[1])
        depth = op.Add(op.Mul(depth, op.Squeeze(span, squeeze)), op.Squeeze(low, squeeze))
        return {"predicted_depth": depth}


MODEL_TYPES = {"prompt_depth_anything": PromptDepthAnythingForDepthEstimation}
