"""Seed-OSS: Llama whose output projection has its own bias flag (``attention_out_bias``)."""

from __future__ import annotations

from dataclasses import dataclass

from mobius.components import Attention, rotary_dim
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel


@dataclass
class SeedOssConfig(LlamaConfig):
    attention_out_bias: bool = False

    @classmethod
    def hf_fields(cls, hf_config):
        return {
            **super().hf_fields(hf_config),
            "attention_out_bias": bool(hf_config.attention_out_bias),
        }


class SeedOssModel(LlamaModel):
    def make_attention(self, config, layer_idx):
        return Attention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,  # q, k, v (on by default)
            out_bias=config.attention_out_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
        )


class SeedOssForCausalLM(LlamaForCausalLM):
    """Seed-OSS's causal LM: the Llama head over :class:`SeedOssModel`."""

    config_class = SeedOssConfig
    model_class = SeedOssModel


MODEL_TYPES = {"seed_oss": SeedOssForCausalLM}
