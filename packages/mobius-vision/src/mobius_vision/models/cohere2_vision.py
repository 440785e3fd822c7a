"""Cohere2 Vision (Command A Vision): Aya Vision's tiles and pixel shuffle, read from the tower's output.

The image features are the tower's ``last_hidden_state`` (after ``post_layernorm``)
of every tile, pixel-shuffled by ``downsample_factor`` and projected by
``linear_1 -> SwiGLU -> linear_2``, without Aya's layernorm. Only the tower's
pooling ``head`` is left unused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Linear, module_scope
from mobius_vision.config import VisionLanguageConfig
from mobius_vision.models.aya_vision import (
    AyaVisionForConditionalGeneration,
    pixel_shuffle,
    swiglu,
    swiglu_size,
)


@dataclass
class Cohere2VisionConfig(VisionLanguageConfig):
    downsample_factor: int = 2
    alignment_intermediate_size: int = 36864

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        return dict(
            fields,
            downsample_factor=int(hf_config.downsample_factor),
            alignment_intermediate_size=swiglu_size(hf_config.alignment_intermediate_size),
        )


class Cohere2VisionMultiModalProjector(nn.Module):
    """``pixel_shuffle -> linear_1 -> SwiGLU -> linear_2``."""

    def __init__(self, width: int, intermediate: int, out: int, factor: int) -> None:
        super().__init__()
        folded = width * factor * factor
        self.factor = factor
        self.linear_1 = Linear(folded, intermediate, bias=True)
        self.linear_2 = Linear(intermediate // 2, out, bias=True)

    def forward(self, op, x):
        x = self.linear_1(op, pixel_shuffle(op, x, self.factor))  # [tiles, tokens, intermediate]
        return self.linear_2(op, swiglu(op, x))  # [tiles, tokens, text_hidden]


class Cohere2VisionForConditionalGeneration(AyaVisionForConditionalGeneration):
    """Aya Vision's composition over the tower's normed output and a norm-free projector."""

    config_class = Cohere2VisionConfig

    def make_projector(self, config: Cohere2VisionConfig) -> nn.Module:
        return Cohere2VisionMultiModalProjector(
            config.vision.hidden_size,
            config.alignment_intermediate_size,
            config.text.hidden_size,
            config.downsample_factor,
        )

    def select_features(self, op, pixel_values):
        """``[tiles, patches, width]``: ``post_layernorm`` of the tower's last state."""
        x = self.tower_states(op, pixel_values)[-1]
        with module_scope(op, self.vision_tower):
            return self.vision_tower.post_layernorm(op, x)

    @property
    def ignored(self) -> tuple[str, ...]:
        # every layer and post_layernorm are read: the base's set, not Aya's
        return (*super(AyaVisionForConditionalGeneration, self).ignored, "vision_tower.head.*")


MODEL_TYPES = {"cohere2_vision": Cohere2VisionForConditionalGeneration}
