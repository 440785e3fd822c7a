"""FlexOlmo: OLMo-2's post-norm layer (norms on each branch's output) with OLMoE's routed experts.

``x + post_attention_layernorm(attn(x))`` then ``x + post_feedforward_layernorm(moe(x))``;
attention normalises q and k across all heads, as OLMo-2 does (no ``clip_qkv``).
"""

from __future__ import annotations

from dataclasses import dataclass

from mobius.components import RMSNorm, rotary_dim
from mobius_text.models.llama import LlamaForCausalLM, LlamaModel
from mobius_text.models.olmo2 import PostNormDecoderLayer
from mobius_text.models.olmoe import FullWidthQKNormAttention, OlmoeConfig, make_olmoe_moe


@dataclass
class FlexOlmoConfig(OlmoeConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        return {**super().hf_fields(hf_config), "clip_qkv": None}


class FlexOlmoModel(LlamaModel):
    def make_layer(self, config, layer_idx):
        attention = FullWidthQKNormAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
            eps=config.rms_norm_eps,
        )
        return PostNormDecoderLayer(
            attention,
            make_olmoe_moe(config),
            RMSNorm(config.hidden_size, config.rms_norm_eps),
            RMSNorm(config.hidden_size, config.rms_norm_eps),
        )


class FlexOlmoForCausalLM(LlamaForCausalLM):
    config_class = FlexOlmoConfig
    model_class = FlexOlmoModel


MODEL_TYPES = {"flex_olmo": FlexOlmoForCausalLM}
