"""GLM-4 (``glm``) and GLM-4-0414 (``glm4``): Llama with interleaved partial RoPE and a fused MLP.

RoPE rotates channel pairs ``(2i, 2i+1)`` of the first ``partial_rotary_factor``
(0.5 by default) of each head, not the two halves. q/k/v carry biases
(``attention_bias``), ``o_proj`` none; the MLP is Phi-3's fused ``gate_up_proj``.
``glm4`` adds RMSNorms after attention and after the MLP, inside the residual.
"""

from __future__ import annotations

from dataclasses import dataclass

from mobius.components import Attention, DecoderLayer, RMSNorm, rotary_dim
from mobius_text.models.helium import InterleavedRotaryAttention
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel
from mobius_text.models.phi3 import Phi3MLP


@dataclass
class GlmConfig(LlamaConfig):
    """GLM needs nothing beyond the normalised fields."""


class GlmModel(LlamaModel):
    def make_attention(self, config: GlmConfig, layer_idx: int) -> Attention:
        return InterleavedRotaryAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=False,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
        )

    def make_layer(self, config: GlmConfig, layer_idx: int) -> DecoderLayer:
        hidden, eps = config.hidden_size, config.rms_norm_eps
        return DecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=Phi3MLP(hidden, config.intermediate_size, config.hidden_act),
            input_layernorm=RMSNorm(hidden, eps),
            post_attention_layernorm=RMSNorm(hidden, eps),
        )


class GlmForCausalLM(LlamaForCausalLM):
    config_class = GlmConfig
    model_class = GlmModel


class Glm4DecoderLayer(DecoderLayer):
    """``x + post_self_attn_norm(attn(norm(x)))`` then ``x + post_mlp_norm(mlp(norm(x)))``."""

    def __init__(self, self_attn, mlp, hidden_size: int, eps: float) -> None:
        super().__init__(self_attn, mlp, RMSNorm(hidden_size, eps), RMSNorm(hidden_size, eps))
        self.post_self_attn_layernorm = RMSNorm(hidden_size, eps)
        self.post_mlp_layernorm = RMSNorm(hidden_size, eps)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h, present = self.self_attn(
            op, self.input_layernorm(op, x), position_embeddings, bias, past_key, past_value
        )
        x = op.Add(x, self.post_self_attn_layernorm(op, h))
        h = self.mlp(op, self.post_attention_layernorm(op, x))
        return op.Add(x, self.post_mlp_layernorm(op, h)), present


class Glm4Model(GlmModel):
    def make_layer(self, config: GlmConfig, layer_idx: int) -> DecoderLayer:
        hidden = config.hidden_size
        return Glm4DecoderLayer(
            self.make_attention(config, layer_idx),
            Phi3MLP(hidden, config.intermediate_size, config.hidden_act),
            hidden,
            config.rms_norm_eps,
        )


class Glm4ForCausalLM(LlamaForCausalLM):
    config_class = GlmConfig
    model_class = Glm4Model


MODEL_TYPES = {"glm": GlmForCausalLM, "glm4": Glm4ForCausalLM}
