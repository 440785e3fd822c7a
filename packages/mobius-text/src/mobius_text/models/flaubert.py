"""FlauBERT: XLM with an optional pre-norm layer order (``pre_norm``).

Post-norm (the default) is XLM's layer exactly. Pre-norm normalises each block's
input instead (``x + attn(norm1(x))``, then ``x + ffn(norm2(x))``) and, like the
original, adds no final norm. ``layerdrop`` only acts in training.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mobius_text.models.xlm import XLMConfig, XLMForFeatureExtraction, XLMModel


@dataclass
class FlaubertConfig(XLMConfig):
    """XLM's fields plus the layer order."""

    pre_norm: bool = False

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        return {**super().hf_fields(hf_config), "pre_norm": bool(hf_config.pre_norm)}


class FlaubertModel(XLMModel):
    def __init__(self, config: FlaubertConfig) -> None:
        super().__init__(config)
        self.pre_norm = config.pre_norm

    def block(self, op, i: int, x, bias):
        if not self.pre_norm:
            return super().block(op, i, x, bias)
        x = op.Add(x, self.attentions[i](op, self.layer_norm1[i](op, x), bias))
        return op.Add(x, self.ffns[i](op, self.layer_norm2[i](op, x)))


class FlaubertForFeatureExtraction(XLMForFeatureExtraction):
    """XLM's heads over :class:`FlaubertModel` (same checkpoint names)."""

    config_class = FlaubertConfig
    model_class = FlaubertModel


MODEL_TYPES = {"flaubert": FlaubertForFeatureExtraction}
