"""Cohere (Command R): a parallel block over one bias-free LayerNorm, interleaved RoPE, scaled logits.

Each layer computes ``x + attn(ln(x)) + mlp(ln(x))`` with a single ``input_layernorm``
(mean-centred, weight only). RoPE rotates adjacent channel pairs (GPT-J layout),
optional query/key LayerNorms carry one weight row per head (``[heads, head_dim]``),
and ``logits = lm_head(h) * logit_scale``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Attention, GatedMLP, LayerNorm, merge_heads, rotary_dim
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel


@dataclass
class CohereConfig(LlamaConfig):
    logit_scale: float = 1.0
    use_qk_norm: bool = False

    @classmethod
    def hf_fields(cls, hf_config):
        return {
            **super().hf_fields(hf_config),  # rms_norm_eps holds layer_norm_eps
            "mlp_bias": False,  # Cohere MLPs never have biases
            "logit_scale": float(hf_config.logit_scale),
            "use_qk_norm": bool(getattr(hf_config, "use_qk_norm", False)),
        }


class HeadwiseLayerNorm(nn.Module):
    """LayerNorm over ``head_dim`` of ``x [batch, seq, heads, head_dim]``, a weight row per head."""

    def __init__(self, num_heads: int, head_dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter([num_heads, head_dim])
        self.eps = eps

    def forward(self, op, x: ir.Value) -> ir.Value:
        ones = op.Constant(value=ir.tensor(np.ones(self.weight.shape[1], dtype=np.float32)))
        normed = op.LayerNormalization(
            x, op.CastLike(ones, x), axis=-1, epsilon=self.eps, stash_type=1
        )
        return op.Mul(normed, self.weight)


def apply_interleaved_rotary(op, x, cos, sin, rotary_dim: int) -> ir.Value:
    """RoPE on adjacent pairs ``(x[2i], x[2i+1])`` of ``x [batch, heads, seq, head_dim]``."""
    cos, sin = op.CastLike(cos, x), op.CastLike(sin, x)
    return op.RotaryEmbedding(x, cos, sin, interleaved=1, rotary_embedding_dim=rotary_dim)


class CohereAttention(Attention):
    """Attention with interleaved RoPE and optional per-head query/key LayerNorms."""

    def __init__(self, *args, qk_norm_eps: float | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if qk_norm_eps is not None:
            self.q_norm = HeadwiseLayerNorm(self.num_heads, self.head_dim, qk_norm_eps)
            self.k_norm = HeadwiseLayerNorm(self.num_kv_heads, self.head_dim, qk_norm_eps)
        else:
            self.q_norm = self.k_norm = None

    def project_qkv(self, op, x):
        heads_last = op.Constant(value_ints=[0, 0, -1, self.head_dim])
        q = op.Reshape(self.q_proj(op, x), heads_last)  # [batch, seq, heads, head_dim]
        k = op.Reshape(self.k_proj(op, x), heads_last)
        v = op.Reshape(self.v_proj(op, x), heads_last)
        if self.q_norm is not None:
            q, k = self.q_norm(op, q), self.k_norm(op, k)
        return tuple(op.Transpose(t, perm=[0, 2, 1, 3]) for t in (q, k, v))

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        q, k, v = self.project_qkv(op, x)
        if position_embeddings is not None:  # None: a layer without RoPE (Cohere2's global layers)
            cos, sin = position_embeddings
            q = apply_interleaved_rotary(op, q, cos, sin, self.rotary_dim)
            k = apply_interleaved_rotary(op, k, cos, sin, self.rotary_dim)
        y, present_key, present_value = self.attend(op, q, k, v, bias, past_key, past_value)
        y = merge_heads(op, y)
        return self.o_proj(op, y), (present_key, present_value)


class ParallelDecoderLayer(nn.Module):
    """``x + attn(ln(x)) + mlp(ln(x))`` with one shared ``input_layernorm``."""

    def __init__(self, self_attn, mlp, input_layernorm) -> None:
        super().__init__()
        self.self_attn = self_attn
        self.mlp = mlp
        self.input_layernorm = input_layernorm

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h = self.input_layernorm(op, x)
        attn, present = self.self_attn(op, h, position_embeddings, bias, past_key, past_value)
        return op.Add(op.Add(x, attn), self.mlp(op, h)), present


class CohereModel(LlamaModel):
    def __init__(self, config: CohereConfig) -> None:
        super().__init__(config)
        self.norm = LayerNorm(config.hidden_size, config.rms_norm_eps, bias=False)

    def make_attention(self, config, layer_idx):
        return CohereAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
            qk_norm_eps=config.rms_norm_eps if config.use_qk_norm else None,
        )

    def make_layer(self, config, layer_idx):
        return ParallelDecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act),
            input_layernorm=LayerNorm(config.hidden_size, config.rms_norm_eps, bias=False),
        )


class CohereForCausalLM(LlamaForCausalLM):
    """Cohere's causal LM: logits multiplied by ``logit_scale``."""

    config_class = CohereConfig
    model_class = CohereModel

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        logits, presents = super().forward(
            op, input_ids, attention_mask, position_ids, past_key_values
        )
        return op.Mul(logits, self.config.logit_scale), presents


MODEL_TYPES = {"cohere": CohereForCausalLM}
