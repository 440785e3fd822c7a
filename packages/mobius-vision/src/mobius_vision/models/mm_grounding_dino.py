"""MM Grounding DINO: Grounding DINO (:mod:`.grounding_dino`) whose class heads scale the
query-token scores by ``1 / sqrt(d_model)`` and add a learned bias (zero-shot-object-detection).

transformers' ``MMGroundingDinoForObjectDetection`` changes nothing else: the same
backbone, text encoder, fusion encoder, query selection and decoder, under the same
checkpoint names. The biases are ``model.encoder_output_class_embed.bias`` (the query
selection's) and ``class_embed.N.bias`` (the decoder's; one shared head, ``class_embed.0``,
when ``decoder_cls_embed_share``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius_vision.models.grounding_dino import (
    GroundingDinoConfig,
    GroundingDinoContrastiveEmbedding,
    GroundingDinoForObjectDetection,
    GroundingDinoModel,
)


@dataclass
class MMGroundingDinoConfig(GroundingDinoConfig):
    """Grounding DINO's, and whether the decoder's layers share one class head."""

    decoder_cls_embed_share: bool = True

    @classmethod
    def from_hf(cls, hf_config: Any) -> MMGroundingDinoConfig:
        base = GroundingDinoConfig.from_hf(hf_config)
        return cls(**vars(base), decoder_cls_embed_share=bool(hf_config.decoder_cls_embed_share))


class MMGroundingDinoContrastiveEmbedding(GroundingDinoContrastiveEmbedding):
    """The dot products divided by ``sqrt(d_model)``, plus ``bias`` (a scalar)."""

    def __init__(self, max_text_len: int) -> None:
        super().__init__(max_text_len)
        self.bias = nn.Parameter([])

    def scores(self, op, queries, text):
        scores = super().scores(op, queries, text)
        width = op.CastLike(op.Shape(queries, start=-1), scores)
        return op.Add(op.Div(scores, op.Sqrt(width)), self.bias)


class MMGroundingDinoModel(GroundingDinoModel):
    contrastive_class = MMGroundingDinoContrastiveEmbedding


class MMGroundingDinoForObjectDetection(GroundingDinoForObjectDetection):
    """Grounding DINO with the biased class heads; only the last layer's is read."""

    config_class = MMGroundingDinoConfig
    model_class = MMGroundingDinoModel

    def __init__(self, config: MMGroundingDinoConfig) -> None:
        super().__init__(config)
        if not config.decoder_cls_embed_share:  # the last layer's head keeps its own name
            earlier = config.decoder_layers - 1
            heads = [GroundingDinoContrastiveEmbedding(config.max_text_len) for _ in range(earlier)]
            self.class_embed = nn.ModuleList(
                [*heads, MMGroundingDinoContrastiveEmbedding(config.max_text_len)]
            )

    @property
    def ignored(self) -> tuple[str, ...]:
        """Grounding DINO's, and the class heads' biases the graphs do not read (the
        decoder's copies, the layers' before the last)."""
        layers = self.config.decoder_layers
        unread = range(1, layers) if self.config.decoder_cls_embed_share else range(layers - 1)
        heads = tuple(f"class_embed.{index}.bias" for index in unread)
        return (*super().ignored, "model.decoder.class_embed.*", *heads)


MODEL_TYPES = {"mm-grounding-dino": MMGroundingDinoForObjectDetection}
