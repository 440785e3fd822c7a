"""CLIP as a dual encoder: zero-shot image–text similarity from its two towers.

The text tower is mobius-text's (:mod:`mobius_text.models.clip_text`), the
vision tower :mod:`mobius_vision.models.clip_vision`'s; each pooled output is
projected (``text_projection``, ``visual_projection``), L2-normalised, and the
cosine similarities scaled by ``exp(logit_scale)``. The module tree is the
checkpoint's (``text_model.*``, ``vision_model.*``). transformers'
``CLIPForImageClassification`` (the vision tower and a classifier, no text tower)
shares the ``clip`` type; such checkpoints are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Linear
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_text.models.clip_text import CLIPTextConfig, CLIPTextTransformer
from mobius_vision.config import VisionConfig
from mobius_vision.models.clip_vision import CLIPVisionConfig, CLIPVisionTransformer


@dataclass
class CLIPConfig(VisionConfig):
    """Both towers' configs; ``image_size`` and ``num_channels`` are the vision tower's."""

    text: Any = None
    vision: Any = None
    projection_dim: int = 512

    text_config_class = CLIPTextConfig
    vision_config_class = CLIPVisionConfig

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        architectures = tuple(getattr(hf_config, "architectures", None) or ())
        if any(a.endswith("ForImageClassification") for a in architectures):
            raise ConfigError(
                f"{architectures[0]} (a vision tower and a classifier) is not built; mobius "
                f"builds {hf_config.model_type} as a zero-shot image–text model"
            )
        text = cls.text_config_class.from_hf(hf_config.text_config)
        vision = cls.vision_config_class.from_hf(hf_config.vision_config)
        return dict(
            model_type=hf_config.model_type,
            image_size=vision.image_size,
            num_channels=vision.num_channels,
            architectures=architectures,
            text=text,
            vision=vision,
            projection_dim=cls.embedding_size(hf_config, text, vision),
        )

    @classmethod
    def embedding_size(cls, hf_config: Any, text: Any, vision: Any) -> int:
        """The width of both embeddings: CLIP's ``projection_dim``."""
        return int(hf_config.projection_dim)


def l2_normalize(op, x):
    """``x / ||x||`` over the last axis (no epsilon, as transformers)."""
    return op.Div(x, op.ReduceL2(x, [-1], keepdims=1))


def similarity(op, text_embeds, image_embeds, logit_scale, logit_bias=None):
    """``(logits_per_image, logits_per_text)``: ``exp(scale) * text @ image.T (+ bias)``."""
    logits_per_text = op.MatMul(text_embeds, op.Transpose(image_embeds, perm=[1, 0]))
    logits_per_text = op.Mul(logits_per_text, op.Exp(logit_scale))  # [text_batch, image_batch]
    if logit_bias is not None:
        logits_per_text = op.Add(logits_per_text, logit_bias)
    return op.Transpose(logits_per_text, perm=[1, 0]), logits_per_text


class CLIPModel(Model):
    """``text_model``, ``vision_model``, both projections and ``logit_scale``."""

    config_class = CLIPConfig
    task = "zero-shot-image-classification"

    def __init__(self, config: CLIPConfig) -> None:
        super().__init__()
        self.config = config
        text, vision, dim = config.text, config.vision, config.projection_dim
        self.text_model = CLIPTextTransformer(text)
        self.vision_model = CLIPVisionTransformer(vision)
        self.visual_projection = Linear(vision.hidden_size, dim)
        self.text_projection = Linear(text.hidden_size, dim)
        self.logit_scale = nn.Parameter([])

    def embeddings(self, op, input_ids, attention_mask, pixel_values):
        """``(text_embeds, image_embeds)``, each ``[batch, projection_dim]``, normalised."""
        _, text = self.text_model(op, input_ids, attention_mask)
        _, image = self.vision_model(op, pixel_values)
        text = l2_normalize(op, self.text_projection(op, text))
        return text, l2_normalize(op, self.visual_projection(op, image))

    def forward(self, op, input_ids, attention_mask, pixel_values):
        text, image = self.embeddings(op, input_ids, attention_mask, pixel_values)
        per_image, per_text = similarity(op, text, image, self.logit_scale)
        return dict(
            logits_per_image=per_image,
            logits_per_text=per_text,
            text_embeds=text,
            image_embeds=image,
        )

    @property
    def ignored(self) -> tuple[str, ...]:
        return ("*.embeddings.position_ids",)  # a buffer older checkpoints saved


MODEL_TYPES = {"clip": CLIPModel}
