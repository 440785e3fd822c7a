"""Fuyu: no vision tower; each image patch is projected by one Linear into a Persimmon decoder.

The processor cuts each image into ``patch_size`` squares (rows of
``|SPEAKER|`` placeholders, each row ended by ``|NEWLINE|``) and hands over
``pixel_values`` [num_patches, patch_size * patch_size * channels], every image's
patches after each other. ``vision_embed_tokens`` maps each patch to the text
width; the features replace the ``image_token_id`` placeholders in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Linear
from mobius_vision.config import VisionLanguageConfig, composed_config
from mobius_vision.models._vl import VisionLanguageModel, text_decoder


@dataclass
class FuyuConfig(VisionLanguageConfig):
    patch_size: int = 30
    num_channels: int = 3

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        # Fuyu has no vision_config: the patches are the image features' only input.
        return dict(
            model_type=hf_config.model_type,
            vision=None,
            text=composed_config(cls.text_hf_config(hf_config)),
            image_token_id=int(hf_config.image_token_id),
            patch_size=int(hf_config.patch_size),
            num_channels=int(hf_config.num_channels),
        )

    @property
    def patch_width(self) -> int:
        return self.patch_size * self.patch_size * self.num_channels


class FuyuForCausalLM(VisionLanguageModel):
    """``vision_embed_tokens`` and the Persimmon (or other) decoder."""

    config_class = FuyuConfig

    def __init__(self, config: FuyuConfig) -> None:
        nn.Module.__init__(self)  # no tower, no projector
        self.config = config
        self.vision_embed_tokens = Linear(config.patch_width, config.text.hidden_size, bias=True)
        self.language_model = text_decoder(config.text)

    def vision_inputs(self, dtype) -> list[tuple]:
        return [("pixel_values", dtype, ["num_patches", self.config.patch_width])]

    def vision_modules(self) -> list[nn.Module]:
        return [self.vision_embed_tokens]

    def image_features(self, op, pixel_values):
        return self.vision_embed_tokens(op, pixel_values)  # [num_patches, text_hidden]

    renames = {"model.vision_embed_tokens.": "vision_embed_tokens.", **VisionLanguageModel.renames}


MODEL_TYPES = {"fuyu": FuyuForCausalLM}
