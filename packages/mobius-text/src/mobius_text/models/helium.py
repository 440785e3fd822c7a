"""Helium: Llama whose rotary embedding turns adjacent channel pairs (GPT-J layout), with
biased q/k/v projections when ``attention_bias`` is set but never a biased ``o_proj``."""

from __future__ import annotations

from mobius.components import Attention, rotary_dim
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel


class InterleavedRotaryAttention(Attention):
    """Attention with the interleaved (pairwise) rotary layout."""

    interleaved_rotary = True


class HeliumModel(LlamaModel):
    def make_attention(self, config: LlamaConfig, layer_idx: int) -> Attention:
        return InterleavedRotaryAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=False,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
        )


class HeliumForCausalLM(LlamaForCausalLM):
    """Helium causal LM."""

    model_class = HeliumModel


MODEL_TYPES = {"helium": HeliumForCausalLM}
