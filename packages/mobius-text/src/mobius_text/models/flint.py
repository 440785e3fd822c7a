"""Flint: Qwen3-MoE attention with per-head softmax sinks, NoPE full layers, sigmoid routing.

* Every head has a learned sink logit that joins the softmax and attends to nothing;
  checkpoints store it as ``self_attn.softmax_offset`` (transformers calls it ``sinks``).
* Only sliding-window layers apply RoPE; full-attention layers have no positional encoding.
* Router: top-k of ``sigmoid(logits)`` (no bias), renormalised when ``norm_topk_prob``;
  an ungated ``shared_expert`` is always added. ``mlp_only_layers`` keep a dense MLP.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import GatedMLP, TransposedParameter, repeat_kv, rotary_dim
from mobius.components.moe import ExpertList, flatten_tokens, top_k_routing, unflatten_tokens
from mobius_text.models.qwen import QKNormAttention
from mobius_text.models.qwen3_moe import Qwen3MoeConfig, Qwen3MoeForCausalLM, Qwen3MoeModel


@dataclass
class FlintConfig(Qwen3MoeConfig):
    shared_expert_intermediate_size: int = 0


class SinkAttention(QKNormAttention):
    """Per-head q/k norms and a softmax over ``[q·kᵀ·scale + mask, sink]`` (sink column dropped)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.softmax_offset = nn.Parameter([self.num_heads])

    def attend(self, op, q, k, v, bias, past_key, past_value):
        key = op.Concat(past_key, k, axis=2)  # [batch, kv_heads, total, head_dim]
        value = op.Concat(past_value, v, axis=2)
        h, kv, d = self.num_heads, self.num_kv_heads, self.head_dim
        keys, values = repeat_kv(op, key, h, kv, d), repeat_kv(op, value, h, kv, d)
        scores = op.Mul(op.MatMul(q, op.Transpose(keys, perm=[0, 1, 3, 2])), self.scale)
        scores = op.Add(scores, bias)  # [batch, heads, seq, total]
        sink_shape = op.Concat(op.Shape(scores, end=3), op.Constant(value_ints=[1]), axis=0)
        sinks = op.Expand(
            op.Reshape(op.CastLike(self.softmax_offset, scores), [1, h, 1, 1]), sink_shape
        )
        probs = op.Softmax(op.Concat(scores, sinks, axis=-1), axis=-1)
        probs = op.Slice(probs, [0], [-1], [3])  # drop the sink column
        return op.MatMul(probs, values), key, value


class SigmoidTopKRouter(nn.Module):
    def __init__(self, config: FlintConfig) -> None:
        super().__init__()
        self.weight = TransposedParameter(config.num_experts, config.hidden_size)
        self.top_k, self.normalize = config.num_experts_per_tok, config.norm_topk_prob

    def forward(self, op, x):
        logits = op.MatMul(x, self.weight)
        return top_k_routing(op, logits, self.top_k, scoring="sigmoid", normalize=self.normalize)


class FlintMoeBlock(nn.Module):
    """Routed experts plus an always-on, ungated ``shared_expert``."""

    def __init__(self, config: FlintConfig) -> None:
        super().__init__()
        h = config.hidden_size
        self.gate = SigmoidTopKRouter(config)
        self.experts = ExpertList(
            [
                GatedMLP(h, config.moe_intermediate_size, config.hidden_act)
                for _ in range(config.num_experts)
            ]
        )
        self.shared_expert = GatedMLP(h, config.shared_expert_intermediate_size, config.hidden_act)
        self.hidden_size = h

    def forward(self, op, x):
        tokens = flatten_tokens(op, x, self.hidden_size)
        y = self.experts.dispatch(op, tokens, self.gate(op, tokens))
        return unflatten_tokens(op, op.Add(y, self.shared_expert(op, tokens)), x)


class FlintModel(Qwen3MoeModel):
    def make_attention(self, config, layer_idx):
        return SinkAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
            eps=config.rms_norm_eps,
        )

    def make_mlp(self, config, layer_idx):
        if not config.is_moe_layer(layer_idx):
            return GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act)
        return FlintMoeBlock(config)

    def layer_uses_rope(self, layer_idx: int) -> bool:
        return self.config.layer_types[layer_idx] == "sliding_attention"


class FlintForCausalLM(Qwen3MoeForCausalLM):
    config_class = FlintConfig
    model_class = FlintModel


MODEL_TYPES = {"flint": FlintForCausalLM}
