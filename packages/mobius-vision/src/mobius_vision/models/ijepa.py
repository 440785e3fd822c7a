"""I-JEPA: a ViT encoder with no class token (positions for the patches only).

Checkpoint keys follow ViT's under ``ijepa.``; the bare model has no pooler and
the classifier reads the mean of all the final token states.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius_vision.models.vit import (
    ViTConfig,
    ViTEmbeddings,
    ViTForImageClassification,
    ViTModel,
    ViTPatchEmbeddings,
)


@dataclass
class IJepaConfig(ViTConfig):
    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        return dict(super().hf_fields(hf_config), pooler=False)  # IJepaModel has no pooler


class IJepaEmbeddings(ViTEmbeddings):
    """``patches + position_embeddings``: no prefix token."""

    extra_tokens = 0

    def __init__(self, config: IJepaConfig) -> None:
        nn.Module.__init__(self)  # ViT's class token does not exist here
        self.patch_embeddings = ViTPatchEmbeddings(config)
        self.position_embeddings = nn.Parameter([1, config.num_patches, config.hidden_size])

    def prefix_tokens(self) -> list:
        return []


class IJepaModel(ViTModel):
    embeddings_class = IJepaEmbeddings


class IJepaForImageClassification(ViTForImageClassification):
    config_class = IJepaConfig
    base_model_prefix = "ijepa"
    model_class = IJepaModel

    def classify(self, op, hidden):
        return self.classifier(op, op.ReduceMean(hidden, op.Constant(value_ints=[1]), keepdims=0))


MODEL_TYPES = {"ijepa": IJepaForImageClassification}
