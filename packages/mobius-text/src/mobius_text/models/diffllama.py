"""DiffLlama: Llama with differential attention, ``(softmax(Q1 K1ᵀ) - λ softmax(Q2 K2ᵀ)) V``.

HF computes it as two attention calls over the two halves of the value heads and
then pairs query heads ``j`` and ``j + heads/2``. Here one attention call reads a
value with both halves side by side (``2 * head_dim`` wide), which gives the same
two outputs; the cache keeps the plain keys and values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Attention, WeightlessRMSNorm, apply_rotary, merge_heads
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel


@dataclass
class DiffLlamaConfig(LlamaConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        fields = {**super().hf_fields(hf_config), "mlp_bias": False}
        if fields["num_key_value_heads"] % 2:
            raise ValueError("DiffLlama needs an even num_key_value_heads")
        return fields


class DifferentialAttention(Attention):
    """Differential attention: two softmax maps per output head, the second weighted by λ."""

    def __init__(self, *args, layer_idx: int, eps: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lambda_init = 0.8 - 0.6 * math.exp(-0.3 * layer_idx)
        self.lambda_q1 = nn.Parameter([self.head_dim])
        self.lambda_k1 = nn.Parameter([self.head_dim])
        self.lambda_q2 = nn.Parameter([self.head_dim])
        self.lambda_k2 = nn.Parameter([self.head_dim])
        self.groupnorm = WeightlessRMSNorm(2 * self.head_dim, eps)

    def lambda_full(self, op, dtype: ir.DataType) -> ir.Value:
        """``exp(q1·k1) - exp(q2·k2) + λ_init``, summed in float32 as PyTorch does."""

        def term(q, k):
            product = op.Mul(op.Cast(q, to=ir.DataType.FLOAT), op.Cast(k, to=ir.DataType.FLOAT))
            return op.Exp(op.ReduceSum(product, keepdims=0))

        value = op.Add(
            op.Sub(term(self.lambda_q1, self.lambda_k1), term(self.lambda_q2, self.lambda_k2)),
            self.lambda_init,
        )
        return op.Cast(value, to=dtype)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        q, k, v = self.project_qkv(op, x)  # [batch, heads, seq, head_dim]
        cos, sin = position_embeddings
        q = apply_rotary(op, q, cos, sin, self.rotary_dim)
        k = apply_rotary(op, k, cos, sin, self.rotary_dim)
        present_key = op.Concat(past_key, k, axis=2)  # [batch, kv_heads, total, head_dim]
        present_value = op.Concat(past_value, v, axis=2)
        # KV head g reads value heads g mod (kv/2) and kv/2 + g mod (kv/2), side by side.
        first, second = op.Split(present_value, num_outputs=2, axis=1, _outputs=2)
        paired = op.Concat(
            op.Concat(first, first, axis=1), op.Concat(second, second, axis=1), axis=-1
        )  # [batch, kv_heads, total, 2*head_dim]
        y = op.Attention(q, present_key, paired, bias, scale=self.scale)  # [b, heads, seq, 2*hd]
        # Query head j + heads/2 holds the second softmax map of output head j.
        y1, y2 = op.Split(y, num_outputs=2, axis=1, _outputs=2)  # [b, heads/2, seq, 2*hd]
        y = op.Sub(y1, op.Mul(self.lambda_full(op, x.dtype), y2))
        y = op.Mul(self.groupnorm(op, y), 1.0 - self.lambda_init)
        # [batch, heads/2, seq, 2*head_dim] -> [batch, seq, heads*head_dim]
        y = merge_heads(op, y)
        return self.o_proj(op, y), (present_key, present_value)


class DiffLlamaModel(LlamaModel):
    def make_attention(self, config: DiffLlamaConfig, layer_idx: int) -> Attention:
        return DifferentialAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            layer_idx=layer_idx,
            eps=config.rms_norm_eps,
        )


class DiffLlamaForCausalLM(LlamaForCausalLM):
    """DiffLlama causal LM."""

    config_class = DiffLlamaConfig
    model_class = DiffLlamaModel


MODEL_TYPES = {"diffllama": DiffLlamaForCausalLM}
