"""LLaVA: a vision tower's inner hidden states, a two-layer MLP projector, any text decoder.

The image features are ``hidden_states[vision_feature_layer]`` of the tower (a
list of layers concatenates along the width), without the class token under the
``default`` selection strategy, projected by ``linear_1 -> act -> linear_2``.
The tower runs only as far as the deepest layer read; the layers after it and
its ``post_layernorm`` are left unused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Linear, get_activation
from mobius.errors import ConfigError
from mobius_vision.config import VisionLanguageConfig
from mobius_vision.models._vl import VisionLanguageModel, flatten_images, layer_index

_TO_END = 2**62


@dataclass
class LlavaConfig(VisionLanguageConfig):
    vision_feature_layer: tuple[int, ...] = (-2,)
    vision_feature_select_strategy: str = "default"
    projector_hidden_act: str = "gelu"
    multimodal_projector_bias: bool = True

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        layers = hf_config.vision_feature_layer
        strategy = hf_config.vision_feature_select_strategy
        if strategy not in ("default", "full"):
            raise ConfigError(f"vision_feature_select_strategy {strategy!r} is not default or full")
        return dict(
            super().hf_fields(hf_config),
            vision_feature_layer=tuple(layers) if isinstance(layers, (list, tuple)) else (layers,),
            vision_feature_select_strategy=strategy,
            projector_hidden_act=hf_config.projector_hidden_act,
            multimodal_projector_bias=bool(getattr(hf_config, "multimodal_projector_bias", True)),
        )


class LlavaMultiModalProjector(nn.Module):
    def __init__(self, in_features: int, hidden: int, act: str, bias: bool) -> None:
        super().__init__()
        self.linear_1 = Linear(in_features, hidden, bias=bias)
        self.act = get_activation(act)
        self.linear_2 = Linear(hidden, hidden, bias=bias)

    def forward(self, op, x):
        return self.linear_2(op, self.act(op, self.linear_1(op, x)))


class LlavaForConditionalGeneration(VisionLanguageModel):
    config_class = LlavaConfig

    def make_projector(self, config: LlavaConfig) -> nn.Module:
        width = config.vision.hidden_size * len(config.vision_feature_layer)
        return LlavaMultiModalProjector(
            width,
            config.text.hidden_size,
            config.projector_hidden_act,
            config.multimodal_projector_bias,
        )

    @property
    def feature_layers(self) -> list[int]:
        """The tower's ``hidden_states`` indices read, non-negative."""
        depth = self.config.vision.num_hidden_layers
        return [layer_index(layer, depth) for layer in self.config.vision_feature_layer]

    def select_features(self, op, pixel_values):
        """``[num_images, tokens, width]``: the chosen states, class token dropped by ``default``."""
        states = self.tower_states(op, pixel_values, max(self.feature_layers))
        chosen = [states[i] for i in self.feature_layers]
        if self.config.vision_feature_select_strategy == "default":
            chosen = [op.Slice(s, [1], [_TO_END], [1]) for s in chosen]
        return chosen[0] if len(chosen) == 1 else op.Concat(*chosen, axis=-1)

    def image_features(self, op, pixel_values):
        x = self.multi_modal_projector(op, self.select_features(op, pixel_values))
        return flatten_images(op, x)  # [num_images * tokens, text_hidden]

    @property
    def ignored(self) -> tuple[str, ...]:
        depth = self.config.vision.num_hidden_layers
        unused = [
            f"vision_tower.encoder.layers.{i}.*" for i in range(max(self.feature_layers), depth)
        ]
        return (*super().ignored, *unused, "vision_tower.post_layernorm.*")


MODEL_TYPES = {"llava": LlavaForConditionalGeneration}
