"""ZAYA: compressed convolutional attention (CCA) and a top-1 MLP router with skip expert.

What differs from Llama:

- CCA projections: queries and keys are mixed along time by a causal depthwise then a
  grouped 1-D convolution (kernel sizes ``cca_time0`` / ``cca_time1``) over ``[q | k]``,
  plus residual paths (``q`` averaged with its repeated ``k``; ``k`` the group mean of
  that); half of each value comes from the current token (``v_proj_current``) and half
  from the previous one (``v_proj_delayed``). Padding tokens are zeroed first;
- q and k are L2-normalised to norm ``sqrt(head_dim)``, keys scaled by ``qk_norm.temp``
  per KV head; RoPE settings per layer type ("hybrid" full, "hybrid_sliding" windowed);
- residual adds are affine: ``(h + hb) * hs + (x + xb) * xs`` per channel; embeddings
  are ``(e + b) * s``;
- the router runs ``down_proj`` (plus, after layer 0, the previous layer's router state
  times ``router_states_scale``), then RMSNorm → fc1 → GELU → fc2 → GELU → out_proj over
  ``num_experts + 1`` classes; top-1 of ``softmax + balancing_biases``, weighted by the
  softmax; the last class means "no expert" (weight 0). Experts are stacked and fused.

Cache per layer: ``key``/``value``; ``conv_state`` (the last ``cca_time0 + cca_time1 - 2``
inputs of the convolution) and ``value_state`` (the last token's delayed value half).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    Linear,
    RMSNorm,
    get_activation,
    merge_heads,
    repeat_kv,
    rotary_dim,
)
from mobius.components.moe import StackedGatedExperts, flatten_tokens, unflatten_tokens
from mobius.config import ArchitectureConfig, RopeConfig
from mobius_text.models._rope_by_type import RotaryByLayerType, rope_by_layer_type_fields
from mobius_text.models.llama import LlamaForCausalLM
from mobius_text.models.mamba import causal_window, real_token_scale

FLOAT = ir.DataType.FLOAT


@dataclass
class ZayaConfig(ArchitectureConfig):
    """Llama fields plus RoPE per layer type, the CCA kernel sizes and the router sizes."""

    rope_by_layer_type: dict[str, RopeConfig] = field(default_factory=dict)
    num_experts: int = 0
    moe_intermediate_size: int = 0
    router_hidden_size: int = 0
    cca_time0: int = 2
    cca_time1: int = 2
    lm_head_bias: bool = False

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        fields.update(
            **rope_by_layer_type_fields(hf_config, fields["layer_types"]),
            num_experts=hf_config.num_experts,
            moe_intermediate_size=hf_config.moe_intermediate_size,
            router_hidden_size=hf_config.router_hidden_size,
            cca_time0=hf_config.cca_time0,
            cca_time1=hf_config.cca_time1,
            lm_head_bias=bool(hf_config.lm_head_bias),
        )
        return fields

    @property
    def conv_channels(self) -> int:
        return (self.num_attention_heads + self.num_key_value_heads) * self.head_dim

    @property
    def conv_state_size(self) -> int:
        return self.cca_time0 - 1 + self.cca_time1 - 1


class Conv1d(nn.Module):
    """A 1-D convolution without padding: ``weight [out, in/groups, kernel]``, ``bias [out]``."""

    def __init__(self, channels: int, kernel: int, groups: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([channels, channels // groups, kernel])
        self.bias = nn.Parameter([channels])
        self.groups = groups

    def forward(self, op, x: ir.Value) -> ir.Value:
        return op.Conv(x, self.weight, self.bias, group=self.groups)


class ZayaCCAProjection(nn.Module):
    """Queries, keys and values of compressed convolutional attention, and the new states."""

    def __init__(self, config: ZayaConfig) -> None:
        super().__init__()
        c = config
        heads, kv_heads, dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = Linear(c.hidden_size, heads * dim, c.attention_bias)
        self.k_proj = Linear(c.hidden_size, kv_heads * dim, c.attention_bias)
        self.v_proj_current = Linear(c.hidden_size, kv_heads * dim // 2, c.attention_bias)
        self.v_proj_delayed = Linear(c.hidden_size, kv_heads * dim // 2, c.attention_bias)
        channels = c.conv_channels
        self.conv_qk_depthwise = Conv1d(channels, c.cca_time0, channels)
        self.conv_qk_grouped = Conv1d(channels, c.cca_time1, heads + kv_heads)
        self.heads, self.kv_heads, self.dim = heads, kv_heads, dim
        self.state_size, self.hidden = c.conv_state_size, c.hidden_size

    def per_head(self, op, x: ir.Value) -> ir.Value:
        """``[b, s, n*dim]`` → ``[b, s, n, dim]``."""
        return op.Reshape(x, op.Constant(value_ints=[0, 0, -1, self.dim]))

    def forward(self, op, x, conv_state, value_state, first_step):
        """``x [b, s, hidden]`` (padding zeroed); ``first_step``: bool scalar, no past yet."""
        q, k = self.q_proj(op, x), self.k_proj(op, x)  # [b, s, H*D], [b, s, KV*D]
        k_heads = op.Transpose(self.per_head(op, k), perm=[0, 2, 1, 3])  # [b, KV, s, D]
        k_repeated = repeat_kv(op, k_heads, self.heads, self.kv_heads, self.dim)
        q_residual = op.Mul(
            op.Add(self.per_head(op, q), op.Transpose(k_repeated, perm=[0, 2, 1, 3])), 0.5
        )  # [b, s, H, D]
        groups = self.heads // self.kv_heads
        k_residual = op.ReduceMean(
            op.Reshape(q_residual, op.Constant(value_ints=[0, 0, self.kv_heads, groups, self.dim])),
            op.Constant(value_ints=[3]),
            keepdims=0,
        )  # [b, s, KV, D]

        qk = op.Transpose(op.Concat(q, k, axis=-1), perm=[0, 2, 1])  # [b, C, s]
        qk, new_conv_state = causal_window(op, conv_state, qk, self.state_size)  # [b, C, state + s]
        mixed = self.conv_qk_grouped(op, self.conv_qk_depthwise(op, qk))  # [b, C, s]
        mixed = op.Transpose(mixed, perm=[0, 2, 1])  # [b, s, C]
        mixed_q, mixed_k = op.Split(
            mixed, [self.heads * self.dim, self.kv_heads * self.dim], axis=-1, _outputs=2
        )
        query = op.Add(self.per_head(op, mixed_q), q_residual)  # [b, s, H, D]
        key = op.Add(self.per_head(op, mixed_k), k_residual)  # [b, s, KV, D]

        current = self.v_proj_current(op, x)  # [b, s, KV*D/2]
        delayed = self.v_proj_delayed(op, x)
        # Before any token the delayed half is v_proj_delayed(0) (its bias).
        zero_row = op.Expand(
            op.CastLike(op.Constant(value_float=0.0), x),
            op.Concat(op.Shape(x, end=1), op.Constant(value_ints=[1, self.hidden]), axis=0),
        )
        start = op.Squeeze(self.v_proj_delayed(op, zero_row), [1])  # [b, KV*D/2]
        previous = op.Where(first_step, start, value_state)
        shifted = op.Concat(op.Unsqueeze(previous, [1]), op.Slice(delayed, [0], [-1], [1]), axis=1)
        new_value_state = op.Squeeze(op.Slice(delayed, [-1], [np.iinfo(np.int64).max], [1]), [1])
        value = self.per_head(op, op.Concat(current, shifted, axis=-1))  # [b, s, KV, D]
        return query, key, value, new_conv_state, new_value_state


class ZayaQKNorm(nn.Module):
    """q and k scaled to norm ``sqrt(head_dim)``; keys then by ``temp`` per KV head."""

    def __init__(self, config: ZayaConfig) -> None:
        super().__init__()
        self.temp = nn.Parameter([config.num_key_value_heads])
        self.scale = config.head_dim**0.5

    def unit(self, op, x: ir.Value) -> ir.Value:
        norm = op.Sqrt(op.ReduceSum(op.Mul(x, x), op.Constant(value_ints=[-1]), keepdims=1))
        eps = float(np.finfo(np.float32).eps)
        return op.Mul(
            x, op.Div(self.scale, op.Max(norm, op.CastLike(op.Constant(value_float=eps), x)))
        )

    def forward(self, op, q, k):
        k = op.Mul(self.unit(op, k), op.Reshape(self.temp, op.Constant(value_ints=[-1, 1])))
        return self.unit(op, q), k


class ZayaAttention(nn.Module):
    """CCA projections, q/k norms, RoPE and attention over the KV cache."""

    def __init__(self, config: ZayaConfig, layer_idx: int) -> None:
        super().__init__()
        c = config
        self.qkv_proj = ZayaCCAProjection(c)
        self.qk_norm = ZayaQKNorm(c)
        self.o_proj = Linear(c.num_attention_heads * c.head_dim, c.hidden_size, c.attention_bias)
        rope = c.rope_by_layer_type[c.layer_types[layer_idx]]
        self.rotary_dim, self.scale = rotary_dim(rope, c.head_dim), c.head_dim**-0.5

    def forward(self, op, x, position_embeddings, bias, past):
        past_key, past_value, conv_state, value_state = past
        first_step = op.Equal(op.Shape(past_key, start=2, end=3), op.Constant(value_ints=[0]))
        first_step = op.Squeeze(first_step, [0])
        q, k, v, conv_state, value_state = self.qkv_proj(op, x, conv_state, value_state, first_step)
        q, k = self.qk_norm(op, q, k)  # [b, s, heads, D]
        q, k, v = (op.Transpose(t, perm=[0, 2, 1, 3]) for t in (q, k, v))
        cos, sin = (op.CastLike(t, q) for t in position_embeddings)
        q = op.RotaryEmbedding(q, cos, sin, interleaved=0, rotary_embedding_dim=self.rotary_dim)
        k = op.RotaryEmbedding(k, cos, sin, interleaved=0, rotary_embedding_dim=self.rotary_dim)
        y, key, value = op.Attention(
            q, k, v, bias, past_key, past_value, scale=self.scale, _outputs=3
        )
        y = merge_heads(op, y)
        return self.o_proj(op, y), (key, value, conv_state, value_state)


class ZayaResidualScaling(nn.Module):
    """``(h + hidden_states_bias) * hidden_states_scale + (x + residual_bias) * residual_scale``."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.hidden_states_scale = nn.Parameter([hidden])
        self.hidden_states_bias = nn.Parameter([hidden])
        self.residual_scale = nn.Parameter([hidden])
        self.residual_bias = nn.Parameter([hidden])

    def forward(self, op, h, x):
        h = op.Mul(op.Add(h, self.hidden_states_bias), self.hidden_states_scale)
        return op.Add(h, op.Mul(op.Add(x, self.residual_bias), self.residual_scale))


class ZayaRouterMLP(nn.Module):
    """RMSNorm, two GELU layers and the class projection of the router."""

    def __init__(self, dim: int, classes: int, eps: float) -> None:
        super().__init__()
        self.norm = RMSNorm(dim, eps)
        self.fc1 = Linear(dim, dim, True)
        self.fc2 = Linear(dim, dim, True)
        self.out_proj = Linear(dim, classes)
        self.act = get_activation("gelu")

    def forward(self, op, x):
        x = self.act(op, self.fc1(op, self.norm(op, x)))
        return self.out_proj(op, self.act(op, self.fc2(op, x)))


class ZayaRouter(nn.Module):
    """Top-1 routing over ``num_experts + 1`` classes; returns ``[tokens, num_experts]`` and the router state."""

    def __init__(self, config: ZayaConfig, layer_idx: int) -> None:
        super().__init__()
        dim, classes = config.router_hidden_size, config.num_experts + 1
        self.down_proj = Linear(config.hidden_size, dim, True)
        self.router_states_scale = nn.Parameter([dim]) if layer_idx != 0 else None
        self.router_mlp = ZayaRouterMLP(dim, classes, config.rms_norm_eps)
        self.balancing_biases = nn.Parameter([classes])
        self.num_experts = config.num_experts

    def forward(self, op, x, previous_state):
        state = self.down_proj(op, x)  # [b, s, R]
        if self.router_states_scale is not None:
            state = op.Add(state, op.Mul(previous_state, self.router_states_scale))
        probs = op.Softmax(op.Cast(self.router_mlp(op, state), to=FLOAT), axis=-1)
        probs = flatten_tokens(op, probs, self.num_experts + 1)  # [tokens, E+1]
        choice = op.Add(probs, op.Cast(self.balancing_biases, to=FLOAT))
        _, index = op.TopK(choice, op.Constant(value_ints=[1]), axis=-1, _outputs=2)
        weight = op.GatherElements(probs, index, axis=1)
        routing = op.ScatterElements(op.Mul(probs, 0.0), index, weight, axis=1)
        routing = op.Slice(routing, [0], [self.num_experts], [1])  # the skip class runs nothing
        return routing, state


class ZayaSparseMoeBlock(nn.Module):
    """Top-1 routed experts; also returns the router state for the next layer."""

    def __init__(self, config: ZayaConfig, layer_idx: int) -> None:
        super().__init__()
        self.gate = ZayaRouter(config, layer_idx)
        self.experts = StackedGatedExperts(
            config.num_experts, config.hidden_size, config.moe_intermediate_size, config.hidden_act
        )
        self.hidden = config.hidden_size

    def forward(self, op, x, previous_state):
        routing, state = self.gate(op, x, previous_state)
        flat = flatten_tokens(op, x, self.hidden)
        return unflatten_tokens(op, self.experts(op, flat, op.CastLike(routing, x)), x), state


class ZayaDecoderLayer(nn.Module):
    """Pre-norm attention and MoE blocks with affine residual adds."""

    def __init__(self, config: ZayaConfig, layer_idx: int) -> None:
        super().__init__()
        hidden, eps = config.hidden_size, config.rms_norm_eps
        self.self_attn = ZayaAttention(config, layer_idx)
        self.mlp = ZayaSparseMoeBlock(config, layer_idx)
        self.input_layernorm = RMSNorm(hidden, eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.post_attention_residual_scale = ZayaResidualScaling(hidden)
        self.post_mlp_residual_scale = ZayaResidualScaling(hidden)

    def forward(self, op, x, router_state, position_embeddings, bias, pad_mask, past):
        h = op.Mul(self.input_layernorm(op, x), pad_mask)  # padding zeroed for the convolution
        h, present = self.self_attn(op, h, position_embeddings, bias, past)
        x = self.post_attention_residual_scale(op, h, x)
        h, router_state = self.mlp(op, self.post_attention_layernorm(op, x), router_state)
        return self.post_mlp_residual_scale(op, h, x), router_state, present


class ZayaModel(RotaryByLayerType, nn.Module):
    """Affine-scaled embeddings, the layers (router state threaded through) and the final norm."""

    windowed_kinds = ("hybrid_sliding",)

    def __init__(self, config: ZayaConfig) -> None:
        super().__init__()
        self.config = config
        hidden = config.hidden_size
        self.embed_tokens = Embedding(config.vocab_size, hidden)
        self.input_hidden_states_scale = nn.Parameter([hidden])
        self.input_hidden_states_bias = nn.Parameter([hidden])
        self.layers = nn.ModuleList(
            [ZayaDecoderLayer(config, i) for i in range(config.num_hidden_layers)]
        )
        self.norm = RMSNorm(hidden, config.rms_norm_eps)
        self.make_rotary_by_layer_type(config)

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        c = self.config
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        rope, bias = self.ropes_and_biases(op, input_ids, attention_mask, position_ids, x.dtype)
        pad_mask = real_token_scale(op, attention_mask, input_ids, x)  # [b, s, 1]
        x = op.Mul(op.Add(x, self.input_hidden_states_bias), self.input_hidden_states_scale)
        router_state, presents = None, []
        for i, (layer, past) in enumerate(zip(self.layers, past_key_values, strict=True)):
            kind = c.layer_types[i]
            x, router_state, present = layer(
                op, x, router_state, rope[kind], bias[kind], pad_mask, past
            )
            presents.append(present)
        return self.norm(op, x), presents


class ZayaForCausalLM(LlamaForCausalLM):
    """ZAYA causal LM; per layer the cache holds keys, values and the two CCA states."""

    config_class = ZayaConfig
    model_class = ZayaModel

    def make_head(self, config: ZayaConfig):
        if not config.lm_head_bias:
            return super().make_head(config)
        if config.tie_word_embeddings:
            raise NotImplementedError("ZAYA: a tied lm_head with a bias is not supported")
        return Linear(config.hidden_size, config.vocab_size, bias=True)

    def cache_layout(self):
        c = self.config
        kv = c.num_key_value_heads
        return [
            [
                ("key", ["batch", kv, "past_sequence", c.head_dim]),
                ("value", ["batch", kv, "past_sequence", c.head_dim]),
                ("conv_state", ["batch", c.conv_channels, c.conv_state_size]),
                ("value_state", ["batch", kv * c.head_dim // 2]),
            ]
        ] * c.num_hidden_layers


MODEL_TYPES = {"zaya": ZayaForCausalLM}
