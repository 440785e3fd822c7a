"""SigLIP's text tower (SigLIP 2's is the same): CLIP's layers attending both ways, the last token pooled.

``pooler_output`` is ``head(final_layer_norm(x)[:, -1])``: SigLIP's processor pads
every text to a fixed length, so the last position is a pad token that has seen
the whole text (with the processor's ``attention_mask``, only its real tokens; a
mask of ones reads the pads too, as the original SigLIP does). The module tree
follows the original checkpoints (``text_model.embeddings...``, ``text_model.head``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir

from mobius.components import Linear, padding_bias
from mobius.config import EncoderConfig
from mobius_text.models.clip_text import CLIPTextModel, CLIPTextTransformer


@dataclass
class SiglipTextConfig(EncoderConfig):
    hidden_act: str = "gelu_pytorch_tanh"
    layer_norm_eps: float = 1e-6
    projection_size: int = 768

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        projection = getattr(hf_config, "projection_size", None) or fields["hidden_size"]
        return dict(fields, projection_size=int(projection))

    @property
    def with_projection(self) -> bool:
        return False  # the head is part of the tower


class SiglipTextTransformer(CLIPTextTransformer):
    """The tower at ``text_model``: bidirectional layers, and ``head`` on the last token."""

    def __init__(self, config: SiglipTextConfig) -> None:
        super().__init__(config)
        self.head = Linear(config.hidden_size, config.projection_size, bias=True)

    def bias(self, op, input_ids, attention_mask, dtype: ir.DataType):
        """Padding only, ``[batch, 1, seq, seq]``; none where the graph has no mask."""
        return None if attention_mask is None else padding_bias(op, attention_mask, dtype)

    def pool(self, op, hidden, input_ids):
        last = op.Gather(hidden, op.Constant(value_int=-1), axis=1)  # [batch, hidden]
        return self.head(op, last)


class SiglipTextModel(CLIPTextModel):
    """The text tower for feature extraction: ``last_hidden_state`` and ``pooler_output``."""

    config_class = SiglipTextConfig
    tower_class = SiglipTextTransformer

    @property
    def pooled_size(self) -> int:
        return self.config.projection_size

    @property
    def ignored(self) -> tuple[str, ...]:
        return ("text_model.embeddings.position_ids",)  # a buffer, if a checkpoint saved it

    def sanitize(self, weights: dict) -> dict:
        """A checkpoint saved by transformers 5 lacks the ``text_model.`` prefix: it is added."""
        return {
            k if k.startswith("text_model.") else f"text_model.{k}": v for k, v in weights.items()
        }


MODEL_TYPES = {"siglip_text_model": SiglipTextModel, "siglip2_text_model": SiglipTextModel}
