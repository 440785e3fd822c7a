"""ERNIE 4.5 (dense): Llama with interleaved RoPE and one ``use_bias`` flag for every projection.

RoPE rotates adjacent channel pairs ``(x[2i], x[2i+1])`` (GLM layout) rather than the
two halves of each head; ``use_bias`` adds biases to q, k, v, o and the MLP.
"""

from __future__ import annotations

from dataclasses import dataclass

from mobius.components import rotary_dim
from mobius_text.models.helium import InterleavedRotaryAttention
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel


@dataclass
class Ernie4_5Config(LlamaConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        use_bias = bool(hf_config.use_bias)
        return {**super().hf_fields(hf_config), "attention_bias": use_bias, "mlp_bias": use_bias}


class Ernie4_5Model(LlamaModel):
    def make_attention(self, config, layer_idx):
        return InterleavedRotaryAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
        )


class Ernie4_5ForCausalLM(LlamaForCausalLM):
    """ERNIE 4.5's causal LM: the Llama head over :class:`Ernie4_5Model`."""

    config_class = Ernie4_5Config
    model_class = Ernie4_5Model


MODEL_TYPES = {"ernie4_5": Ernie4_5ForCausalLM}
