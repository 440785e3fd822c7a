"""StableLM: a Llama-shaped decoder with LayerNorms, partial RoPE and optional per-head q/k LayerNorms.

``use_qkv_bias`` biases q/k/v; ``qk_layernorm`` normalises each head of the
queries and keys with its own weight (``norms.{head}``); ``use_parallel_residual``
feeds attention and MLP the same normalised input and has no second norm.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Attention,
    DecoderLayer,
    GatedMLP,
    LayerNorm,
    rotary_dim,
)
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel


@dataclass
class StableLmConfig(LlamaConfig):
    use_qkv_bias: bool = False
    qk_layernorm: bool = False
    use_parallel_residual: bool = False

    @classmethod
    def hf_fields(cls, hf_config):
        return {
            **super().hf_fields(hf_config),
            "use_qkv_bias": bool(hf_config.use_qkv_bias),
            "qk_layernorm": bool(hf_config.qk_layernorm),
            "use_parallel_residual": bool(hf_config.use_parallel_residual),
        }


class HeadWeight(nn.Module):
    """One head's LayerNorm weight (HF ``norms.{head}.weight``); calling it yields the parameter."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([dim])

    def forward(self, op):
        return self.weight


class LayerNormPerHead(nn.Module):
    """LayerNorm over ``head_dim`` with a separate weight per head (no bias), in one normalisation."""

    def __init__(self, head_dim: int, num_heads: int, eps: float) -> None:
        super().__init__()
        self.norms = nn.ModuleList([HeadWeight(head_dim) for _ in range(num_heads)])
        self.head_dim, self.eps = head_dim, eps

    def forward(self, op, x):  # x: [batch, heads, seq, head_dim]
        ones = op.CastLike(op.Constant(value=ir.tensor(np.ones(self.head_dim, np.float32))), x)
        normed = op.LayerNormalization(x, ones, axis=-1, epsilon=self.eps, stash_type=1)
        weights = op.Concat(*[op.Unsqueeze(norm(op), [0]) for norm in self.norms], axis=0)
        return op.Mul(normed, op.Unsqueeze(weights, [1]))  # weights: [heads, 1, head_dim]


class StableLmAttention(Attention):
    def __init__(self, config: StableLmConfig) -> None:
        super().__init__(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.use_qkv_bias,
            out_bias=False,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
        )
        self.qk_layernorm = config.qk_layernorm
        if config.qk_layernorm:
            eps = config.rms_norm_eps
            self.q_layernorm = LayerNormPerHead(self.head_dim, self.num_heads, eps)
            self.k_layernorm = LayerNormPerHead(self.head_dim, self.num_kv_heads, eps)

    def project_qkv(self, op, x):
        q, k, v = super().project_qkv(op, x)  # [batch, heads, seq, head_dim]
        if self.qk_layernorm:
            q, k = self.q_layernorm(op, q), self.k_layernorm(op, k)
        return q, k, v


class ParallelResidualLayer(DecoderLayer):
    """``x + attn(norm(x)) + mlp(norm(x))``: one norm shared by both branches."""

    def __init__(self, self_attn, mlp, input_layernorm) -> None:
        nn.Module.__init__(self)
        self.self_attn, self.mlp, self.input_layernorm = self_attn, mlp, input_layernorm

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h = self.input_layernorm(op, x)
        attn, present = self.self_attn(op, h, position_embeddings, bias, past_key, past_value)
        return op.Add(op.Add(x, attn), self.mlp(op, h)), present


class StableLmModel(LlamaModel):
    def __init__(self, config: StableLmConfig) -> None:
        super().__init__(config)
        self.norm = LayerNorm(config.hidden_size, config.rms_norm_eps)

    def make_layer(self, config: StableLmConfig, layer_idx: int) -> DecoderLayer:
        hidden, eps = config.hidden_size, config.rms_norm_eps
        attn = StableLmAttention(config)
        mlp = GatedMLP(hidden, config.intermediate_size, config.hidden_act)
        if config.use_parallel_residual:
            return ParallelResidualLayer(attn, mlp, LayerNorm(hidden, eps))
        return DecoderLayer(attn, mlp, LayerNorm(hidden, eps), LayerNorm(hidden, eps))


class StableLmForCausalLM(LlamaForCausalLM):
    config_class = StableLmConfig
    model_class = StableLmModel


MODEL_TYPES = {"stablelm": StableLmForCausalLM}
