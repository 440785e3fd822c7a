"""HyperCLOVA X: Granite's µP multipliers plus Peri-LN post-norms, and logits *multiplied*.

Each residual branch is RMS-normalised before it is scaled and added
(``post_norm1`` after attention, ``post_norm2`` after the MLP, when
``use_post_norm``). Unlike Granite, ``logits_scaling`` multiplies the logits.
``attention_multiplier`` defaults to ``head_dim ** -0.5`` (the config fills it in).
"""

from __future__ import annotations

from dataclasses import dataclass

from mobius.components import RMSNorm
from mobius_text.models.granite import (
    GraniteConfig,
    GraniteForCausalLM,
    GraniteModel,
    ScaledResidualDecoderLayer,
)
from mobius_text.models.llama import LlamaForCausalLM


@dataclass
class HyperCLOVAXConfig(GraniteConfig):
    use_post_norm: bool = True

    @classmethod
    def hf_fields(cls, hf_config):
        return {**super().hf_fields(hf_config), "use_post_norm": bool(hf_config.use_post_norm)}


class PostNormDecoderLayer(ScaledResidualDecoderLayer):
    """Granite's layer with each branch output RMS-normalised (``post_norm1``, ``post_norm2``)."""

    def __init__(self, *args, hidden_size: int, eps: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.post_norm1 = RMSNorm(hidden_size, eps)
        self.post_norm2 = RMSNorm(hidden_size, eps)

    def attention_branch(self, op, x, position_embeddings, bias, past_key, past_value):
        h, present = super().attention_branch(
            op, x, position_embeddings, bias, past_key, past_value
        )
        return self.post_norm1(op, h), present

    def mlp_branch(self, op, x):
        return self.post_norm2(op, super().mlp_branch(op, x))


class HyperCLOVAXModel(GraniteModel):
    def make_layer(self, config, layer_idx):
        if not config.use_post_norm:
            return super().make_layer(config, layer_idx)
        granite_layer = super().make_layer(config, layer_idx)
        return PostNormDecoderLayer(
            self_attn=granite_layer.self_attn,
            mlp=granite_layer.mlp,
            input_layernorm=granite_layer.input_layernorm,
            post_attention_layernorm=granite_layer.post_attention_layernorm,
            residual_multiplier=config.residual_multiplier,
            hidden_size=config.hidden_size,
            eps=config.rms_norm_eps,
        )


class HyperCLOVAXForCausalLM(GraniteForCausalLM):
    """HyperCLOVA X's causal LM: logits multiplied by ``logits_scaling``."""

    config_class = HyperCLOVAXConfig
    model_class = HyperCLOVAXModel

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        logits, presents = LlamaForCausalLM.forward(
            self, op, input_ids, attention_mask, position_ids, past_key_values
        )
        return op.Mul(logits, self.config.logits_scaling), presents


MODEL_TYPES = {"hyperclovax": HyperCLOVAXForCausalLM}
