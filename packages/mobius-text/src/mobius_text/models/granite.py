"""Granite: Llama with µP multipliers on the embeddings, residual branches, attention and logits.

``x = embed(ids) * embedding_multiplier``; each layer adds ``branch * residual_multiplier``;
attention scores use ``attention_multiplier`` instead of ``head_dim ** -0.5``;
``logits = lm_head(h) / logits_scaling``.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from mobius.components import (
    Attention,
    DecoderLayer,
    Embedding,
    GatedMLP,
    RMSNorm,
    rotary_dim,
)
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel


@dataclass
class GraniteConfig(LlamaConfig):
    embedding_multiplier: float = 1.0
    residual_multiplier: float = 1.0
    attention_multiplier: float = 1.0
    logits_scaling: float = 1.0

    @classmethod
    def hf_fields(cls, hf_config):
        return {
            **super().hf_fields(hf_config),
            "embedding_multiplier": float(hf_config.embedding_multiplier),
            "residual_multiplier": float(hf_config.residual_multiplier),
            "attention_multiplier": float(hf_config.attention_multiplier),
            "logits_scaling": float(hf_config.logits_scaling),
        }


class ScaledEmbedding(Embedding):
    """Token lookup times a constant (the checkpoint stores the unscaled table)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, multiplier: float) -> None:
        super().__init__(num_embeddings, embedding_dim)
        self.multiplier = multiplier

    def forward(self, op, ids: ir.Value) -> ir.Value:
        return op.Mul(super().forward(op, ids), self.multiplier)


class ScaledResidualDecoderLayer(DecoderLayer):
    """``x + multiplier * attn(norm(x))`` then ``x + multiplier * mlp(norm(x))``."""

    def __init__(self, *args, residual_multiplier: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.residual_multiplier = residual_multiplier

    def attention_branch(self, op, x, position_embeddings, bias, past_key, past_value):
        return self.self_attn(
            op, self.input_layernorm(op, x), position_embeddings, bias, past_key, past_value
        )

    def mlp_branch(self, op, x):
        return self.mlp(op, self.post_attention_layernorm(op, x))

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h, present = self.attention_branch(op, x, position_embeddings, bias, past_key, past_value)
        x = op.Add(x, op.Mul(h, self.residual_multiplier))
        x = op.Add(x, op.Mul(self.mlp_branch(op, x), self.residual_multiplier))
        return x, present


class GraniteModel(LlamaModel):
    layer_class = ScaledResidualDecoderLayer

    def __init__(self, config: GraniteConfig) -> None:
        super().__init__(config)
        self.embed_tokens = ScaledEmbedding(
            config.vocab_size, config.hidden_size, config.embedding_multiplier
        )

    def make_attention(self, config, layer_idx):
        return Attention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
            scale=config.attention_multiplier,
        )

    def make_layer(self, config, layer_idx):
        return self.layer_class(
            self_attn=self.make_attention(config, layer_idx),
            mlp=GatedMLP(
                config.hidden_size, config.intermediate_size, config.hidden_act, config.mlp_bias
            ),
            input_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
            post_attention_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
            residual_multiplier=config.residual_multiplier,
        )


class GraniteForCausalLM(LlamaForCausalLM):
    """Granite's causal LM: logits divided by ``logits_scaling``."""

    config_class = GraniteConfig
    model_class = GraniteModel

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        logits, presents = super().forward(
            op, input_ids, attention_mask, position_ids, past_key_values
        )
        return op.Div(logits, self.config.logits_scaling), presents


MODEL_TYPES = {"granite": GraniteForCausalLM}
