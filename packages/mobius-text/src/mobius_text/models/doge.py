"""Doge: Llama with dynamic mask attention, learned residual scales and optional CDMoE.

What differs from Llama:

- queries and keys are RMS-normalised per head before RoPE (as Qwen3);
- *dynamic mask attention*: every visible key gets an additive score
  ``exp(A * softplus(dt_proj(values)))`` per kv head, computed from the cached values;
  once there are more than ``keep_window_size`` keys, only that many highest-scoring
  keys stay visible in each query row;
- residuals are scaled per channel: ``input_residual * x + attn(...)``, likewise after the MLP;
- with ``is_moe``, the MLP adds a cross-domain mixture of "experts" chosen with
  product keys (``num_keys**2`` experts from two top-``num_keys`` lists); each expert is a
  row of ``down_embed`` and of ``up_embed``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    GatedMLP,
    Linear,
    RMSNorm,
    get_activation,
    lowest_value,
    merge_heads,
    repeat_kv,
    rotary_dim,
)
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel
from mobius_text.models.qwen import QKNormAttention


@dataclass
class DogeConfig(LlamaConfig):
    """Llama fields plus the dynamic-mask window and the CDMoE settings."""

    keep_window_size: int = 2048
    is_moe: bool = False
    num_experts: int = 0
    num_experts_per_tok: int = 0
    norm_topk_prob: bool = False

    @classmethod
    def hf_fields(cls, hf_config):
        return {
            **super().hf_fields(hf_config),
            "keep_window_size": hf_config.keep_window_size,
            "is_moe": bool(hf_config.is_moe),
            "num_experts": hf_config.num_experts,
            "num_experts_per_tok": hf_config.num_experts_per_tok,
            "norm_topk_prob": bool(hf_config.norm_topk_prob),
        }


class DogeAttention(QKNormAttention):
    """QK-normed attention whose additive mask is made dynamic by ``A`` and ``dt_proj``."""

    def __init__(self, config: DogeConfig) -> None:
        super().__init__(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
            eps=config.rms_norm_eps,
        )
        kv_width = config.num_key_value_heads * config.head_dim
        self.A = nn.Parameter([config.num_key_value_heads])
        self.dt_proj = Linear(kv_width, config.num_key_value_heads, config.attention_bias)
        self.keep_window_size = config.keep_window_size

    def dynamic_bias(self, op, bias, value):
        """``bias [batch, 1, seq, total]`` and all values → ``[batch, heads, seq, total]``."""
        flat = merge_heads(op, value)  # [batch, total, kv_heads*dim]
        dt = op.Exp(op.Mul(self.A, op.Softplus(self.dt_proj(op, flat))))  # [batch, total, kv_heads]
        dt = op.Unsqueeze(op.Transpose(dt, perm=[0, 2, 1]), [2])  # [batch, kv_heads, 1, total]
        lowest = op.CastLike(op.Constant(value_float=lowest_value(bias.dtype)), bias)
        zero = op.CastLike(op.Constant(value_float=0.0), bias)
        mask = op.Where(op.Equal(bias, zero), dt, lowest)  # [batch, kv_heads, seq, total]
        # Keep the keep_window_size largest entries per row (every entry while total <= it).
        total = op.Slice(op.Shape(mask), [3], [4])
        keep = op.Min(op.Constant(value_ints=[self.keep_window_size]), total)
        _, kept = op.TopK(mask, keep, axis=-1, _outputs=2)
        one = op.CastLike(op.Constant(value_float=1.0), bias)
        selected = op.ScatterElements(
            op.Mul(mask, zero), kept, op.Expand(one, op.Shape(kept)), axis=-1
        )
        mask = op.Where(op.Equal(selected, zero), lowest, mask)
        # repeat kv heads: [batch, kv_heads, seq, total] -> [batch, heads, seq, total]
        group = self.num_heads // self.num_kv_heads
        mask = op.Expand(op.Unsqueeze(mask, [2]), op.Constant(value_ints=[1, 1, group, 1, 1]))
        shape = op.Shape(mask)
        heads = op.Constant(value_ints=[self.num_heads])
        return op.Reshape(
            mask, op.Concat(op.Slice(shape, [0], [1]), heads, op.Slice(shape, [3], [5]), axis=0)
        )

    def attend(self, op, q, k, v, bias, past_key, past_value):
        # Written out rather than ONNX ``Attention``: rows with every key masked (left
        # padding) must average all values as PyTorch does, since CDMoE mixes tokens.
        key = op.Concat(past_key, k, axis=2)  # [batch, kv_heads, total, head_dim]
        value = op.Concat(past_value, v, axis=2)
        bias = self.dynamic_bias(op, bias, value)  # [batch, heads, seq, total]
        heads, kv_heads, dim = self.num_heads, self.num_kv_heads, self.head_dim
        keys = repeat_kv(op, key, heads, kv_heads, dim)  # [batch, heads, total, head_dim]
        values = repeat_kv(op, value, heads, kv_heads, dim)
        scores = op.Mul(op.MatMul(q, op.Transpose(keys, perm=[0, 1, 3, 2])), self.scale)
        probs = op.Softmax(op.Add(scores, bias), axis=-1)
        return op.MatMul(probs, values), key, value


class DogeCDMoE(nn.Module):
    """A gated MLP plus product-key experts (``down_embed``/``up_embed`` rows) weighted by softmax."""

    def __init__(self, config: DogeConfig) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.gate_proj = Linear(hidden, config.intermediate_size, config.mlp_bias)
        self.up_proj = Linear(hidden, config.intermediate_size, config.mlp_bias)
        self.down_proj = Linear(config.intermediate_size, hidden, config.mlp_bias)
        self.num_keys = math.floor(math.sqrt(config.num_experts))
        self.router_gate = Linear(hidden, 2 * self.num_keys)
        self.down_embed = Embedding(config.num_experts, hidden)
        self.up_embed = Embedding(config.num_experts, hidden)
        self.act = get_activation(config.hidden_act)
        self.top_k, self.hidden, self.norm_topk_prob = (
            config.num_experts_per_tok,
            hidden,
            config.norm_topk_prob,
        )

    def forward(self, op, x: ir.Value) -> ir.Value:
        keys = self.num_keys
        flat = op.Reshape(x, op.Constant(value_ints=[-1, self.hidden]))  # [tokens, hidden]
        # HF views the [tokens, 2*keys] logits as [2, tokens, keys]: a reinterpretation of the
        # row-major buffer (not a split of the last axis), which Reshape reproduces exactly.
        logits = op.Reshape(self.router_gate(op, flat), op.Constant(value_ints=[2, -1, keys]))
        scores, indices = op.TopK(logits, op.Constant(value_ints=[keys]), axis=-1, _outputs=2)
        scores_x, scores_y = op.Split(
            scores, num_outputs=2, axis=0, _outputs=2
        )  # [1, tokens, keys]
        indices_x, indices_y = op.Split(indices, num_outputs=2, axis=0, _outputs=2)
        all_scores = op.Add(
            op.Unsqueeze(op.Squeeze(scores_x, [0]), [-1]),
            op.Unsqueeze(op.Squeeze(scores_y, [0]), [-2]),
        )  # [tokens, keys, keys]
        all_indices = op.Add(
            op.Mul(op.Unsqueeze(op.Squeeze(indices_x, [0]), [-1]), keys),
            op.Unsqueeze(op.Squeeze(indices_y, [0]), [-2]),
        )
        flat_pairs = op.Constant(value_ints=[0, keys * keys])
        all_scores = op.Reshape(all_scores, flat_pairs)  # [tokens, keys*keys]
        all_indices = op.Reshape(all_indices, flat_pairs)
        top_scores, positions = op.TopK(
            all_scores, op.Constant(value_ints=[self.top_k]), axis=-1, _outputs=2
        )
        experts = op.GatherElements(all_indices, positions, axis=-1)  # [tokens, top_k]
        weights = op.Softmax(top_scores, axis=-1)
        if self.norm_topk_prob:
            weights = op.Div(weights, op.ReduceSum(weights, op.Constant(value_ints=[-1])))
        down = self.down_embed(op, experts)  # [tokens, top_k, hidden]
        up = self.up_embed(op, experts)
        expert_weights = op.Squeeze(
            op.MatMul(down, op.Unsqueeze(flat, [-1])), [-1]
        )  # [tokens, top_k]
        expert_weights = op.Mul(self.act(op, expert_weights), weights)
        expert_states = op.MatMul(op.Unsqueeze(expert_weights, [1]), up)  # [tokens, 1, hidden]
        expert_states = op.Reshape(expert_states, op.Shape(x))
        dense = self.down_proj(op, op.Mul(self.act(op, self.gate_proj(op, x)), self.up_proj(op, x)))
        return op.Add(dense, expert_states)


class DogeDecoderLayer(nn.Module):
    """Pre-norm layer with learned per-channel residual scales."""

    def __init__(self, config: DogeConfig) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.input_layernorm = RMSNorm(hidden, config.rms_norm_eps)
        self.self_attn = DogeAttention(config)
        self.input_residual = nn.Parameter([hidden])
        self.post_attention_layernorm = RMSNorm(hidden, config.rms_norm_eps)
        if config.is_moe:
            self.mlp = DogeCDMoE(config)
        else:
            self.mlp = GatedMLP(
                hidden, config.intermediate_size, config.hidden_act, config.mlp_bias
            )
        self.post_attention_residual = nn.Parameter([hidden])

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h, present = self.self_attn(
            op, self.input_layernorm(op, x), position_embeddings, bias, past_key, past_value
        )
        x = op.Add(op.Mul(self.input_residual, x), h)
        h = self.mlp(op, self.post_attention_layernorm(op, x))
        return op.Add(op.Mul(self.post_attention_residual, x), h), present


class DogeModel(LlamaModel):
    def make_layer(self, config, layer_idx):
        return DogeDecoderLayer(config)


class DogeForCausalLM(LlamaForCausalLM):
    """Doge causal LM (HF ``DogeForCausalLM``)."""

    config_class = DogeConfig
    model_class = DogeModel


MODEL_TYPES = {"doge": DogeForCausalLM}
