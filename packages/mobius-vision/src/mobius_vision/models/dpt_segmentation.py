"""DPT semantic segmentation (``DPTForSemanticSegmentation``): DPT's ViT and neck
(:mod:`mobius_vision.models.dpt`) under a segmentation head.

Registered by architecture class: the ``dpt`` type stays a depth estimator. The head
(``head.head.0..5``) is a 3x3 conv (no bias), BatchNorm, ReLU, a 1x1 conv to the labels and
a bilinear 2x upsampling (``align_corners=True``) of the fused map ``head_in_index``; the
auxiliary head only adds a training loss and is left unread. transformers builds this class
over DPT's own ViT only (a ``backbone_config`` is refused), and reshapes the patches as a
square, so the image size (the processor's, else the config's) must be square. ``logits``
are ``[batch, num_labels, h, w]`` before any upsampling to the image, as transformers
returns them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Conv2d
from mobius.errors import ConfigError
from mobius_vision.config import image_size_pair
from mobius_vision.models._conv import Activation, BatchNorm2d, Identity, Sequential
from mobius_vision.models.dinov2 import patch_grid
from mobius_vision.models.dpt import DptConfig, DptForDepthEstimation, Upsample2x


@dataclass
class DptSegmentationConfig(DptConfig):
    image_size: tuple[int, int] = (384, 384)
    num_labels: int = 2

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        if fields["vit"] is None:
            raise ConfigError(
                f"{hf_config.model_type}: transformers' DPTForSemanticSegmentation runs DPT's own "
                "ViT only, not a backbone_config"
            )
        size = tuple(fields["vit"].image_size)
        fields = dict(fields, image_size=size, num_labels=int(hf_config.num_labels))
        cls(**fields).check_size(size)
        return fields

    def check_size(self, size: tuple[int, int]) -> None:
        """Refuse what transformers cannot run: a non-square image, or one off the patch grid."""
        height, width = size
        if height != width or height % self.patch_size:
            raise ConfigError(
                f"{self.model_type}: segmentation reshapes the patches as a square: the image "
                f"size {height}x{width} must be square and a multiple of {self.patch_size}"
            )

    def with_image_size(self, size: tuple[int, int]) -> DptSegmentationConfig:
        """The config at ``size`` (the ViT's positions are resized to any patch grid)."""
        size = image_size_pair(size)
        self.check_size(size)
        return dataclasses.replace(self, image_size=size)


class DptSemanticSegmentationHead(nn.Module):
    def __init__(self, config: DptSegmentationConfig) -> None:
        super().__init__()
        features = config.fusion_hidden_size
        self.head = Sequential(
            [
                Conv2d(features, features, 3, padding=1, bias=False),
                BatchNorm2d(features),
                Activation("relu"),
                Identity(),  # dropout
                Conv2d(features, config.num_labels, 1),
                Upsample2x(),
            ]
        )
        self.head_in_index = config.head_in_index

    def forward(self, op, fused: list):
        return self.head(op, fused[self.head_in_index])


class DptForSemanticSegmentation(DptForDepthEstimation):
    """``pixel_values`` -> ``logits`` ``[batch, num_labels, h, w]``."""

    config_class = DptSegmentationConfig
    task = "semantic-segmentation"

    def __init__(self, config: DptSegmentationConfig) -> None:
        super().__init__(config)
        self.head = DptSemanticSegmentationHead(config)

    @property
    def ignored(self) -> tuple[str, ...]:
        return (*super().ignored, "auxiliary_head.*")

    def output_shapes(self) -> dict[str, list]:
        return {"logits": ["batch", self.config.num_labels, "logits_height", "logits_width"]}

    def forward(self, op, pixel_values):
        grid = patch_grid(op, pixel_values, self.config.patch_size)
        fused = self.neck(op, self.dpt(op, pixel_values), grid)
        return {"logits": self.head(op, fused)}


MODEL_TYPES = {"DPTForSemanticSegmentation": DptForSemanticSegmentation}
