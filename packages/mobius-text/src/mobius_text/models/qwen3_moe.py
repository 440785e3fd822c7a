"""Qwen3-MoE: Qwen3 attention (per-head q/k RMS norms) with routed experts and no shared expert."""

from __future__ import annotations

from dataclasses import dataclass

from mobius.components import GatedMLP, rotary_dim
from mobius_text.models.mixtral import SparseMoeBlock
from mobius_text.models.qwen import QKNormAttention
from mobius_text.models.qwen2_moe import (
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
    Qwen2MoeModel,
    make_experts,
)


@dataclass
class Qwen3MoeConfig(Qwen2MoeConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        fields["attention_bias"] = bool(getattr(hf_config, "attention_bias", False))
        return fields


class Qwen3MoeModel(Qwen2MoeModel):
    def make_attention(self, config, layer_idx):
        return QKNormAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
            eps=config.rms_norm_eps,
        )

    def make_mlp(self, config, layer_idx):
        if not config.is_moe_layer(layer_idx):
            return GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act)
        return SparseMoeBlock(*make_experts(config), config.hidden_size)


class Qwen3MoeForCausalLM(Qwen2MoeForCausalLM):
    config_class = Qwen3MoeConfig
    model_class = Qwen3MoeModel


MODEL_TYPES = {"qwen3_moe": Qwen3MoeForCausalLM}
