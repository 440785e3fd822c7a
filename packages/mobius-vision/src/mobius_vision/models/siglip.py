"""SigLIP as a dual encoder: zero-shot image–text similarity (a sigmoid's logits) from its two towers.

The text tower is mobius-text's (:mod:`mobius_text.models.siglip_text`), the
vision tower :mod:`mobius_vision.models.siglip_vision`'s. Each tower's pooled
output is the embedding itself (the text ``head``, the attention-pooling head),
L2-normalised; the logits are ``exp(logit_scale) * text @ image.T + logit_bias``.
SigLIP's processor pads texts to a fixed length (64) and gives an
``attention_mask``, which the text tower reads (a mask of ones reads the pads as
the original SigLIP does). ``SiglipForImageClassification`` checkpoints (the
``siglip`` type too) are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.errors import ConfigError
from mobius.model import Model
from mobius_text.models.siglip_text import SiglipTextConfig, SiglipTextTransformer
from mobius_vision.models.clip import CLIPConfig, l2_normalize, similarity
from mobius_vision.models.siglip_vision import SiglipVisionConfig, SiglipVisionTransformer


@dataclass
class SiglipConfig(CLIPConfig):
    text_config_class = SiglipTextConfig
    vision_config_class = SiglipVisionConfig

    @classmethod
    def embedding_size(cls, hf_config: Any, text: Any, vision: Any) -> int:
        """The vision tower's width, which the text head must project to (no projections)."""
        if not vision.vision_use_head:
            raise ConfigError("vision_use_head is False: SigLIP's image embedding is its head's")
        if text.projection_size != vision.hidden_size:
            raise ConfigError(
                f"text projection_size {text.projection_size} differs from the vision "
                f"hidden_size {vision.hidden_size}: the embeddings cannot be compared"
            )
        return vision.hidden_size


class SiglipModel(Model):
    """``text_model``, ``vision_model``, ``logit_scale`` and ``logit_bias``."""

    config_class = SiglipConfig
    task = "zero-shot-image-classification"
    text_tower_class = SiglipTextTransformer
    vision_tower_class = SiglipVisionTransformer

    def __init__(self, config: SiglipConfig) -> None:
        super().__init__()
        self.config = config
        self.text_model = self.text_tower_class(config.text)
        self.vision_model = self.vision_tower_class(config.vision)
        self.logit_scale = nn.Parameter([1])
        self.logit_bias = nn.Parameter([1])

    def forward(self, op, input_ids, attention_mask, pixel_values):
        _, text = self.text_model(op, input_ids, attention_mask)
        _, image = self.vision_model(op, pixel_values)
        text, image = l2_normalize(op, text), l2_normalize(op, image)
        per_image, per_text = similarity(op, text, image, self.logit_scale, self.logit_bias)
        return dict(
            logits_per_image=per_image,
            logits_per_text=per_text,
            text_embeds=text,
            image_embeds=image,
        )

    @property
    def ignored(self) -> tuple[str, ...]:
        return ("*.embeddings.position_ids",)  # a buffer, if a checkpoint saved it


MODEL_TYPES = {"siglip": SiglipModel}
