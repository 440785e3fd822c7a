"""I-BERT, float mode: RoBERTa under the ``ibert.`` prefix, its quantisation state left unread.

With ``quant_mode=False`` every I-BERT module computes in float what RoBERTa's does
(its ``IntLayerNorm`` is a LayerNorm, ``IntGELU`` the exact GELU, ``IntSoftmax`` a
softmax). The integer weights, scaling factors and activation ranges the checkpoint
carries are buffers of the integer-only mode, which is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mobius.errors import ConfigError
from mobius_text.models.roberta import RobertaConfig, RobertaForFeatureExtraction

# Buffers of the integer-only mode (QuantEmbedding, QuantLinear, QuantAct, IntLayerNorm).
QUANT_STATE = (
    "*.weight_integer",
    "*.weight_scaling_factor",
    "*.bias_integer",
    "*.fc_scaling_factor",
    "*.act_scaling_factor",
    "*.x_min",
    "*.x_max",
    "*.LayerNorm.shift",
)


@dataclass
class IBertConfig(RobertaConfig):
    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if getattr(hf_config, "quant_mode", False):
            raise ConfigError(
                "I-BERT quant_mode=True (integer-only inference) is not built; "
                "mobius builds the float model (quant_mode=False)"
            )
        if getattr(hf_config, "hidden_act", "gelu") != "gelu":
            raise ConfigError("I-BERT supports only hidden_act='gelu'")
        return super().hf_fields(hf_config)


class IBertForFeatureExtraction(RobertaForFeatureExtraction):
    """RoBERTa's graph and heads, with the encoder named ``ibert`` as ``IBertFor*`` checkpoints name it."""

    config_class = IBertConfig
    base_model_prefix = "ibert"

    @property
    def ignored(self) -> tuple[str, ...]:
        return (*super().ignored, *QUANT_STATE)


MODEL_TYPES = {"ibert": IBertForFeatureExtraction}
