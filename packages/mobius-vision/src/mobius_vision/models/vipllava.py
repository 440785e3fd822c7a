"""ViP-LLaVA: LLaVA reading several tower layers, with a LayerNorm first in the projector.

The image features are ``hidden_states[i][:, 1:]`` for each ``vision_feature_layer``
(the class token always dropped; there is no selection strategy), concatenated
along the width, then ``projector_layernorm -> linear_1 -> act -> linear_2``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm
from mobius_vision.models.llava import (
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaMultiModalProjector,
)


@dataclass
class VipLlavaConfig(LlavaConfig):
    projector_layernorm_eps: float = 1e-5

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        layers = hf_config.vision_feature_layer
        fields = super(LlavaConfig, cls).hf_fields(hf_config)  # no selection strategy to read
        return dict(
            fields,
            vision_feature_layer=tuple(layers) if isinstance(layers, (list, tuple)) else (layers,),
            vision_feature_select_strategy="default",  # the class token is always dropped
            projector_hidden_act=hf_config.projector_hidden_act,
            multimodal_projector_bias=True,
            projector_layernorm_eps=hf_config.projector_layernorm_eps,
        )


class VipLlavaMultiModalProjector(LlavaMultiModalProjector):
    """``projector_layernorm`` over the concatenated layers, then LLaVA's two-layer MLP."""

    def __init__(self, in_features: int, hidden: int, act: str, eps: float) -> None:
        super().__init__(in_features, hidden, act, bias=True)
        self.projector_layernorm = LayerNorm(in_features, eps)

    def forward(self, op, x):
        return super().forward(op, self.projector_layernorm(op, x))


class VipLlavaForConditionalGeneration(LlavaForConditionalGeneration):
    config_class = VipLlavaConfig

    def make_projector(self, config: VipLlavaConfig) -> nn.Module:
        width = config.vision.hidden_size * len(config.vision_feature_layer)
        return VipLlavaMultiModalProjector(
            width,
            config.text.hidden_size,
            config.projector_hidden_act,
            config.projector_layernorm_eps,
        )


MODEL_TYPES = {"vipllava": VipLlavaForConditionalGeneration}
