"""Phi-1/1.5/2: attention and MLP in parallel off one LayerNorm, partial RoPE, biases everywhere.

Names follow the checkpoint: the attention output is ``dense``, the MLP is
``fc1``/``fc2``, the final norm ``final_layernorm``, and ``lm_head`` has a bias.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import MLP, Attention, LayerNorm, Linear, TiedLMHead, rotary_dim
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel
from mobius_text.models.stablelm import ParallelResidualLayer


@dataclass
class PhiConfig(LlamaConfig):
    qk_layernorm: bool = False

    @classmethod
    def hf_fields(cls, hf_config):
        return {**super().hf_fields(hf_config), "qk_layernorm": bool(hf_config.qk_layernorm)}


class PhiAttention(Attention):
    """Biased q/k/v and ``dense`` output; optional LayerNorm of queries and keys over ``head_dim``."""

    def __init__(self, config: PhiConfig) -> None:
        nn.Module.__init__(self)  # the output projection is named ``dense``, not ``o_proj``
        hidden, heads, kv_heads = (
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
        )
        head_dim = config.head_dim
        self.q_proj = Linear(hidden, heads * head_dim, bias=True)
        self.k_proj = Linear(hidden, kv_heads * head_dim, bias=True)
        self.v_proj = Linear(hidden, kv_heads * head_dim, bias=True)
        self.dense = Linear(heads * head_dim, hidden, bias=True)
        self.num_heads, self.num_kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.rotary_dim = rotary_dim(config.rope, head_dim)
        self.scale = head_dim**-0.5
        self.qk_layernorm = config.qk_layernorm
        if config.qk_layernorm:
            self.q_layernorm = LayerNorm(head_dim, config.rms_norm_eps)
            self.k_layernorm = LayerNorm(head_dim, config.rms_norm_eps)

    def project_qkv(self, op, x):
        q, k, v = super().project_qkv(op, x)  # [batch, heads, seq, head_dim]
        if self.qk_layernorm:
            q, k = self.q_layernorm(op, q), self.k_layernorm(op, k)
        return q, k, v

    def o_proj(self, op, y):  # Attention.forward's output projection
        return self.dense(op, y)


class PhiModel(LlamaModel):
    def __init__(self, config: PhiConfig) -> None:
        super().__init__(config)
        del self._modules["norm"]  # Phi's final norm is a LayerNorm named ``final_layernorm``
        self.final_layernorm = LayerNorm(config.hidden_size, config.rms_norm_eps)
        object.__setattr__(self, "norm", self.final_layernorm)  # what LlamaModel.forward calls

    def make_layer(self, config: PhiConfig, layer_idx: int):
        hidden = config.hidden_size
        return ParallelResidualLayer(
            PhiAttention(config),
            MLP(hidden, config.intermediate_size, config.hidden_act, bias=True),
            LayerNorm(hidden, config.rms_norm_eps),
        )


class PhiForCausalLM(LlamaForCausalLM):
    config_class = PhiConfig
    model_class = PhiModel

    def make_head(self, config: PhiConfig):
        if config.tie_word_embeddings:
            return TiedLMHead(self.input_embedding(), bias=True)  # keeps its bias
        return Linear(config.hidden_size, config.vocab_size, bias=True)


MODEL_TYPES = {"phi": PhiForCausalLM}
