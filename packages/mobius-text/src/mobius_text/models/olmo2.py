"""OLMo 2: post-norm residual branches and RMS-normalised q/k over the whole projection.

Each layer computes ``x + post_attention_layernorm(attn(x))`` then
``x + post_feedforward_layernorm(mlp(x))``: the branch outputs are normalised,
not the inputs (there is no ``input_layernorm``). ``q_norm`` and ``k_norm`` are
RMSNorms over all heads at once (``[heads * head_dim]``), before the head split.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import Attention, GatedMLP, RMSNorm, rotary_dim
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel


@dataclass
class Olmo2Config(LlamaConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        return {**super().hf_fields(hf_config), "mlp_bias": False}  # no MLP biases


class FullQKNormAttention(Attention):
    """Attention with q and k RMS-normalised across all heads before splitting them."""

    def __init__(self, *args, eps: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.q_norm = RMSNorm(self.num_heads * self.head_dim, eps)
        self.k_norm = RMSNorm(self.num_kv_heads * self.head_dim, eps)

    def project_qkv(self, op, x):
        q = self.split_heads(op, self.q_norm(op, self.q_proj(op, x)))
        k = self.split_heads(op, self.k_norm(op, self.k_proj(op, x)))
        v = self.split_heads(op, self.v_proj(op, x))
        return q, k, v


class PostNormDecoderLayer(nn.Module):
    """``x + post_attention_layernorm(attn(x))`` then ``x + post_feedforward_layernorm(mlp(x))``."""

    def __init__(self, self_attn, mlp, post_attention_layernorm, post_feedforward_layernorm):
        super().__init__()
        self.self_attn = self_attn
        self.mlp = mlp
        self.post_attention_layernorm = post_attention_layernorm
        self.post_feedforward_layernorm = post_feedforward_layernorm

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h, present = self.self_attn(op, x, position_embeddings, bias, past_key, past_value)
        x = op.Add(x, self.post_attention_layernorm(op, h))
        x = op.Add(x, self.post_feedforward_layernorm(op, self.mlp(op, x)))
        return x, present


class Olmo2Model(LlamaModel):
    def make_attention(self, config, layer_idx):
        return FullQKNormAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
            eps=config.rms_norm_eps,
        )

    def make_layer(self, config, layer_idx):
        return PostNormDecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act),
            post_attention_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
            post_feedforward_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
        )


class Olmo2ForCausalLM(LlamaForCausalLM):
    """OLMo 2's causal LM: the Llama head over :class:`Olmo2Model`."""

    config_class = Olmo2Config
    model_class = Olmo2Model


MODEL_TYPES = {"olmo2": Olmo2ForCausalLM}
