"""Jais 2: Arcee's non-gated relu² MLP with biased LayerNorms instead of RMSNorm.

q, k, v, o and the MLP carry biases by default (``attention_bias`` / ``mlp_bias``).
"""

from __future__ import annotations

from mobius.components import DecoderLayer, LayerNorm
from mobius_text.models.arcee import UpDownMLP
from mobius_text.models.llama import LlamaForCausalLM, LlamaModel


class Jais2Model(LlamaModel):
    def __init__(self, config) -> None:
        super().__init__(config)
        self.norm = LayerNorm(config.hidden_size, config.rms_norm_eps)  # from layer_norm_eps

    def make_layer(self, config, layer_idx):
        return DecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=UpDownMLP(
                config.hidden_size, config.intermediate_size, config.hidden_act, config.mlp_bias
            ),
            input_layernorm=LayerNorm(config.hidden_size, config.rms_norm_eps),
            post_attention_layernorm=LayerNorm(config.hidden_size, config.rms_norm_eps),
        )


class Jais2ForCausalLM(LlamaForCausalLM):
    """Jais 2's causal LM: the Llama head over :class:`Jais2Model`."""

    model_class = Jais2Model


MODEL_TYPES = {"jais2": Jais2ForCausalLM}
