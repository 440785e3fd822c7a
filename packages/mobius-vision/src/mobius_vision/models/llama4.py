"""Llama 4 (Scout, Maverick): the tiled vision tower, a one-linear projector, the ``llama4_text``
decoder (MoE, chunked attention, NoPE layers) as mobius-text builds it.

The processor cuts each image into ``image_size`` tiles (plus a global tile when there
are several); every tile's adapter features (:mod:`~mobius_vision.models.llama4_vision`)
go through ``multi_modal_projector.linear_1`` and replace the ``<|patch|>`` placeholders
(``image_token_index``) in order. The checkpoint names the tower ``vision_model`` and the
decoder ``language_model.model`` / ``language_model.lm_head``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from onnxscript import nn

from mobius.components import Linear
from mobius.errors import ConfigError
from mobius_vision.config import VisionLanguageConfig
from mobius_vision.models._vl import VisionLanguageModel, flatten_images


@dataclass
class Llama4Config(VisionLanguageConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        if fields["vision"].model_type != "llama4_vision_model":
            raise ConfigError(
                f"Llama 4 projects its own tower's features, not {fields['vision'].model_type}'s"
            )
        return fields


class Llama4MultiModalProjector(nn.Module):
    def __init__(self, vision_output_dim: int, text_hidden: int) -> None:
        super().__init__()
        self.linear_1 = Linear(vision_output_dim, text_hidden, bias=False)

    def forward(self, op, x):
        return self.linear_1(op, x)


class Llama4ForConditionalGeneration(VisionLanguageModel):
    """``vision_model`` (tiles -> adapter tokens), ``multi_modal_projector``, ``language_model``."""

    config_class = Llama4Config
    renames: ClassVar[dict[str, str]] = {
        "vision_model.": "vision_tower.",
        "model.vision_model.": "vision_tower.",
        "model.multi_modal_projector.": "multi_modal_projector.",
        "model.language_model.": "language_model.model.",
        "lm_head.": "language_model.lm_head.",
    }

    def make_projector(self, config: Llama4Config) -> nn.Module:
        return Llama4MultiModalProjector(config.vision.vision_output_dim, config.text.hidden_size)

    def image_features(self, op, pixel_values):
        tokens = self.vision_tower(op, pixel_values)  # [tiles, tokens, vision_output_dim]
        return self.multi_modal_projector(op, flatten_images(op, tokens))


MODEL_TYPES = {"llama4": Llama4ForConditionalGeneration}
