"""GPT-OSS: a sparse-MoE decoder with attention sinks and alternating sliding/full layers.

What differs from Llama:

- every attention head has a learned *sink* logit that joins the softmax
  denominator and is then dropped, so a head may attend to "nothing";
- biased q/k/v/o projections; YaRN RoPE;
- each MLP is a top-k mixture of experts with a biased router (softmax over the
  top-k logits) and biased experts applying a clamped SwiGLU:
  ``(clip(up, -limit, limit) + 1) * g * sigmoid(alpha * g)`` with ``g = min(gate, limit)``;
  the checkpoint fuses gate and up into ``gate_up_proj [experts, hidden, 2*inter]``
  with gate and up *interleaved* along the last axis (even columns gate, odd up).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Attention,
    DecoderLayer,
    Linear,
    RMSNorm,
    fused_ops,
    repeat_kv,
    rotary_dim,
    scaled_dot_product_attention,
)
from mobius.components.moe import (
    dispatch_experts,
    flatten_tokens,
    top_k_routing,
    unflatten_tokens,
)
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel


@dataclass
class GptOssConfig(LlamaConfig):
    """Llama fields plus the expert count, top-k and the clamped-SwiGLU constants."""

    num_local_experts: int = 0
    num_experts_per_tok: int = 0
    swiglu_alpha: float = 1.702
    swiglu_limit: float = 7.0

    @classmethod
    def hf_fields(cls, hf_config):
        return {
            **super().hf_fields(hf_config),
            "num_local_experts": hf_config.num_local_experts,
            "num_experts_per_tok": hf_config.num_experts_per_tok,
            "swiglu_alpha": float(hf_config.swiglu_alpha),
            "swiglu_limit": float(hf_config.swiglu_limit),
        }


class SinkAttention(Attention):
    """Attention whose softmax also sees one learned logit per head (``sinks [heads]``).

    Written out explicitly (the ONNX ``Attention`` op has no sink input):
    ``softmax([q·kᵀ·scale + mask, sink])`` with the sink column dropped before the value product.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sinks = nn.Parameter([self.num_heads])

    def attend(self, op, q, k, v, bias, past_key, past_value):
        if fused_ops(op):  # GroupQueryAttention takes the sinks as its ``head_sink``
            return scaled_dot_product_attention(
                op, q, k, v, bias, past_key, past_value, **self.attention_shape(), sinks=self.sinks
            )
        key = op.Concat(past_key, k, axis=2)  # [batch, kv_heads, total, head_dim]
        value = op.Concat(past_value, v, axis=2)
        heads, kv_heads, dim = self.num_heads, self.num_kv_heads, self.head_dim
        keys = repeat_kv(op, key, heads, kv_heads, dim)  # [batch, heads, total, head_dim]
        values = repeat_kv(op, value, heads, kv_heads, dim)
        scores = op.Mul(op.MatMul(q, op.Transpose(keys, perm=[0, 1, 3, 2])), self.scale)
        scores = op.Add(scores, bias)  # [batch, heads, seq, total]
        sink_shape = op.Concat(
            op.Slice(op.Shape(scores), [0], [3]), op.Constant(value_ints=[1]), axis=0
        )
        sinks = op.Expand(
            op.Reshape(self.sinks, op.Constant(value_ints=[1, heads, 1, 1])), sink_shape
        )
        probs = op.Softmax(
            op.Concat(scores, sinks, axis=-1), axis=-1
        )  # [batch, heads, seq, total+1]
        probs = op.Slice(probs, [0], [-1], [3])  # drop the sink column
        return op.MatMul(probs, values), key, value


class GptOssExperts(nn.Module):
    """All experts as fused 3-D weights, in the checkpoint's ``[experts, in, out]`` layout.

    Dispatched sparsely (each expert runs on the tokens routed to it) by the shared
    :func:`dispatch_experts`.
    """

    def __init__(self, hidden: int, inter: int, num_experts: int, alpha: float, limit: float):
        super().__init__()
        self.gate_up_proj = nn.Parameter([num_experts, hidden, 2 * inter])
        self.gate_up_proj_bias = nn.Parameter([num_experts, 2 * inter])
        self.down_proj = nn.Parameter([num_experts, inter, hidden])
        self.down_proj_bias = nn.Parameter([num_experts, hidden])
        self.num_experts, self.alpha, self.limit = num_experts, alpha, limit

    def expert(self, op, x: ir.Value, e: int) -> ir.Value:
        """Expert ``e`` on ``x [n, hidden]``: the clamped SwiGLU of interleaved gate/up columns."""
        index = op.Constant(value_int=e)
        gate_up = op.MatMul(x, op.Gather(self.gate_up_proj, index, axis=0))  # [n, 2*inter]
        gate_up = op.Add(gate_up, op.Gather(self.gate_up_proj_bias, index, axis=0))
        end = np.iinfo(np.int64).max
        gate = op.Slice(gate_up, [0], [end], [-1], [2])  # even columns
        up = op.Slice(gate_up, [1], [end], [-1], [2])  # odd columns
        gate = op.Min(gate, self.limit)  # clamped from above only
        up = op.Clip(up, -self.limit, self.limit)
        glu = op.Mul(gate, op.Sigmoid(op.Mul(gate, self.alpha)))
        y = op.Mul(op.Add(up, 1.0), glu)
        y = op.MatMul(y, op.Gather(self.down_proj, index, axis=0))
        return op.Add(y, op.Gather(self.down_proj_bias, index, axis=0))

    def forward(self, op, x: ir.Value, routing: ir.Value) -> ir.Value:
        """``x [tokens, hidden]``, ``routing [tokens, experts]`` (zero off the top-k) → ``[tokens, hidden]``."""
        experts = [partial(self.expert, e=e) for e in range(self.num_experts)]
        return dispatch_experts(op, x, routing, experts)


class GptOssMLP(nn.Module):
    """Top-k routing (softmax over the k largest biased router logits) over :class:`GptOssExperts`."""

    def __init__(self, config: GptOssConfig) -> None:
        super().__init__()
        hidden, experts = config.hidden_size, config.num_local_experts
        self.router = Linear(hidden, experts, bias=True)
        self.experts = GptOssExperts(
            hidden, config.intermediate_size, experts, config.swiglu_alpha, config.swiglu_limit
        )
        self.top_k, self.hidden = config.num_experts_per_tok, hidden

    def forward(self, op, x: ir.Value) -> ir.Value:
        flat = flatten_tokens(op, x, self.hidden)  # [tokens, hidden]
        routing = top_k_routing(op, self.router(op, flat), self.top_k, softmax_first=False)
        return unflatten_tokens(op, self.experts(op, flat, routing), x)


class GptOssModel(LlamaModel):
    def make_attention(self, config, layer_idx):
        return SinkAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
        )

    def make_layer(self, config, layer_idx):
        return DecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=GptOssMLP(config),
            input_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
            post_attention_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
        )


class GptOssForCausalLM(LlamaForCausalLM):
    """GPT-OSS causal LM (HF ``GptOssForCausalLM``)."""

    config_class = GptOssConfig
    model_class = GptOssModel


MODEL_TYPES = {"gpt_oss": GptOssForCausalLM}
