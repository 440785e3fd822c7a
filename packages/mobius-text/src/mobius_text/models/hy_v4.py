"""HY-V4 (Hy4): DeepSeek-V3.2's sparse MLA with sinks, gates and hyper-connections.

What differs from GLM-MoE-DSA (DeepSeek-V3.2 with indexers shared across layers):

- MLA and indexer rotate halves (no interleaving); the indexer rotates the *last*
  ``qk_rope_head_dim`` channels of its heads, and its key LayerNorm uses ``rms_norm_eps``;
- attention has one learned sink logit per head (``self_attn.sinks``) in its softmax,
  and its output heads are gated by ``sigmoid(gate_proj(x))``;
- the residual is ``hc_mult`` streams (``_hyper_connections``): ``attn_hc`` / ``ffn_hc``
  collapse them into each block's input and spread its output back (``post`` scaled by
  ``hc_magnitude``, no stream mixing); ``hc_head`` collapses them before the final norm;
- routed experts are fused (``experts.gate_up_proj``) with a clamped SwiGLU:
  ``silu(min(gate, limit)) * clip(up, -limit, limit)``.

Checkpoints keep the original names (``hc_pre.hc_attn_layer.hc_fn``,
``learnable_sink_param``, ``linear_gate``...); :meth:`HYV4ForCausalLM.sanitize` applies
transformers' renames. Multi-token-prediction layers (``model.mtp_layers``) are unused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import onnx_ir as ir
from onnxscript import nn

from mobius.components import GatedMLP, LayerNorm, Linear, attention_bias
from mobius.components.moe import (
    StackedGatedExperts,
    expert_matmul,
    flatten_tokens,
    unflatten_tokens,
)
from mobius_text.models._hyper_connections import (
    HyperConnection,
    HyperHead,
    expand,
    expand_embeddings,
)
from mobius_text.models.deepseek_v2 import DeepseekV2Router
from mobius_text.models.deepseek_v32 import (
    DeepseekV32Attention,
    DeepseekV32Indexer,
    IndexedDecoderLayer,
)
from mobius_text.models.glm_moe_dsa import (
    GlmMoeDsaConfig,
    GlmMoeDsaForCausalLM,
    GlmMoeDsaModel,
)


@dataclass
class HYV4Config(GlmMoeDsaConfig):
    """GLM-MoE-DSA's fields plus the hyper-connection constants and the SwiGLU clamp."""

    hc_mult: int = 4
    hc_magnitude: float = 2.0
    hc_eps: float = 1e-6
    swiglu_limit: float = 10.0

    @classmethod
    def hf_fields(cls, hf_config):
        return {
            **super().hf_fields(hf_config),
            "rope_layout": "half",
            "hc_mult": hf_config.hc_mult,
            "hc_magnitude": float(hf_config.hc_magnitude),
            "hc_eps": float(hf_config.hc_eps),
            "swiglu_limit": float(hf_config.swiglu_limit),
        }


class HYV4Indexer(DeepseekV32Indexer):
    """The DeepSeek-V3.2 indexer rotating its last channels; key LayerNorm at ``rms_norm_eps``."""

    def __init__(self, config: HYV4Config) -> None:
        super().__init__(config)
        self.k_norm = LayerNorm(config.index_head_dim, config.rms_norm_eps)

    def rotate(self, op, x: ir.Value, cos: ir.Value, sin: ir.Value) -> ir.Value:
        """Rotate-half RoPE on the last ``rope_dim`` channels of ``x [b, h, s, D]``."""
        x_pass, x_rot = op.Split(x, [self.dim - self.rope_dim, self.rope_dim], axis=-1, _outputs=2)
        cos, sin = op.CastLike(cos, x), op.CastLike(sin, x)
        return op.Concat(x_pass, op.RotaryEmbedding(x_rot, cos, sin), axis=-1)


class HYV4Attention(DeepseekV32Attention):
    """Sparse MLA with per-head sinks and a sigmoid output gate (``gate_proj``)."""

    indexer_class = HYV4Indexer

    def __init__(self, config: HYV4Config, has_indexer: bool = True) -> None:
        super().__init__(config, has_indexer)
        heads = config.num_attention_heads
        self.gate_proj = Linear(config.hidden_size, heads * config.v_head_dim)
        self.sinks = nn.Parameter([heads])

    def project_query(self, op, x):
        q_resid, query, _ = super().project_query(op, x)
        return q_resid, query, self.gate_proj(op, x)  # gate [b, s, H * v]

    def attend(self, op, query, key, value, bias):
        """``softmax([q·kᵀ·scale + bias, sink])`` with the sink column dropped, times the values."""
        scores = op.Mul(op.MatMul(query, op.Transpose(key, perm=[0, 1, 3, 2])), self.scale)
        scores = op.Add(scores, bias)  # [b, H, s, total]
        sink_shape = op.Concat(
            op.Shape(scores, start=0, end=3), op.Constant(value_ints=[1]), axis=0
        )
        sinks = op.Reshape(op.CastLike(self.sinks, scores), op.Constant(value_ints=[1, -1, 1, 1]))
        probs = op.Softmax(op.Concat(scores, op.Expand(sinks, sink_shape), axis=-1), axis=-1)
        probs = op.Slice(probs, [0], [-1], [3])  # drop the sink column
        return op.MatMul(probs, value)  # [b, H, s, v]


def clamped_swiglu(op, act, gate: ir.Value, up: ir.Value, limit: float) -> ir.Value:
    """``act(min(gate, limit)) * clip(up, -limit, limit)``."""
    high = op.CastLike(op.Constant(value_float=limit), gate)
    low = op.CastLike(op.Constant(value_float=-limit), gate)
    return op.Mul(act(op, op.Min(gate, high)), op.Clip(up, low, high))


class HYV4Experts(StackedGatedExperts):
    """Fused experts with the clamped SwiGLU ``silu(min(gate, l)) * clip(up, -l, l)``.

    transformers clamps whatever the limit (its docstring's "<= 0 disables" is not in the code).
    """

    def __init__(self, num_experts: int, hidden: int, inter: int, limit: float) -> None:
        super().__init__(num_experts, hidden, inter, "silu")
        self.limit = limit

    def expert(self, op, e: int, x: ir.Value) -> ir.Value:
        gate_up = expert_matmul(op, x, self.gate_up_proj, e)  # [n, 2 * inter]
        gate, up = op.Split(gate_up, axis=-1, num_outputs=2, _outputs=2)
        h = clamped_swiglu(op, self.act, gate, up, self.limit)
        return expert_matmul(op, h, self.down_proj, e)


class HYV4MoE(nn.Module):
    """DeepSeek-V3 routing (sigmoid, corrected choice) over the clamped experts, plus shared ones."""

    def __init__(self, config: HYV4Config) -> None:
        super().__init__()
        c = config
        self.gate = DeepseekV2Router(c)
        self.experts = HYV4Experts(
            c.n_routed_experts, c.hidden_size, c.moe_intermediate_size, c.swiglu_limit
        )
        self.shared_experts = GatedMLP(
            c.hidden_size, c.moe_intermediate_size * c.n_shared_experts, c.hidden_act
        )
        self.hidden = c.hidden_size

    def forward(self, op, x: ir.Value) -> ir.Value:
        flat = flatten_tokens(op, x, self.hidden)  # [N, hidden]
        routed = unflatten_tokens(op, self.experts(op, flat, self.gate(op, flat)), x)
        return op.Add(routed, self.shared_experts(op, x))


class HYV4DecoderLayer(IndexedDecoderLayer):
    """The indexed layer over ``hc_mult`` residual streams ``[b, s, n, hidden]``."""

    def __init__(self, layer: IndexedDecoderLayer, config: HYV4Config) -> None:
        super().__init__(
            layer.self_attn, layer.mlp, layer.input_layernorm, layer.post_attention_layernorm
        )
        hc = dict(
            norm_eps=config.rms_norm_eps,
            hc_eps=config.hc_eps,
            post_magnitude=config.hc_magnitude,
            post_eps=True,
        )
        self.attn_hc = HyperConnection(config.hc_mult, config.hidden_size, **hc)
        self.ffn_hc = HyperConnection(config.hc_mult, config.hidden_size, **hc)

    def forward(self, op, streams, position_embeddings, bias, keep, *past):
        post, _, x = self.attn_hc(op, streams)
        h, present, keep = self.self_attn(
            op, self.input_layernorm(op, x), position_embeddings, bias, keep, *past
        )
        streams = expand(op, streams, h, post)
        post, _, x = self.ffn_hc(op, streams)
        streams = expand(op, streams, self.mlp(op, self.post_attention_layernorm(op, x)), post)
        return streams, present, keep


class HYV4Model(GlmMoeDsaModel):
    """Indexed layers over hyper-connection streams; ``hc_head`` collapses them before ``norm``."""

    attention_class = HYV4Attention

    def __init__(self, config: HYV4Config) -> None:
        super().__init__(config)
        self.hc_head = HyperHead(
            config.hc_mult,
            config.hidden_size,
            norm_eps=config.rms_norm_eps,
            hc_eps=config.hc_eps,
            norm_first=False,
        )

    def make_mlp(self, config, layer_idx):
        if config.mlp_layer_types[layer_idx] == "sparse":
            return HYV4MoE(config)
        return GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act)

    def make_layer(self, config, layer_idx):
        return HYV4DecoderLayer(super().make_layer(config, layer_idx), config)

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        x = self.embed_tokens(op, input_ids)  # [b, s, hidden]
        cos_sin = self.rotary_emb(op, position_ids)
        seq_len = op.Squeeze(op.Slice(op.Shape(input_ids), [1], [2]), [0])
        bias = attention_bias(op, attention_mask, seq_len, x.dtype)
        streams = expand_embeddings(op, x, self.config.hc_mult)  # [b, s, n, hidden]
        presents, keep = [], None
        for layer, past in zip(self.layers, past_key_values, strict=True):
            streams, present, keep = layer(op, streams, cos_sin, bias, keep, *past)
            presents.append(present)
        return self.norm(op, self.hc_head(op, streams)), presents


# transformers' renames of the original checkpoint names, in its order.
RENAMES = [
    (re.compile(pattern), target)
    for pattern, target in [
        (r"\.hc_pre\.hc_", ".hc_"),
        (r"\.learnable_sink_param", ".sinks"),
        (r"\.linear_gate", ".gate_proj"),
        (r"\.hc_attn_layer\.hc_(fn|base|scale)", r".attn_hc.\1"),
        (r"\.hc_mlp_layer\.hc_(fn|base|scale)", r".ffn_hc.\1"),
        (r"\.hc_head_(fn|base|scale)", r".hc_\1"),
    ]
]


class HYV4ForCausalLM(GlmMoeDsaForCausalLM):
    """HY-V4 causal LM (HF ``HYV4ForCausalLM``); caches as DeepSeek-V3.2's per indexer layer."""

    config_class = HYV4Config
    model_class = HYV4Model
    ignored = ("model.mtp_layers.*",)  # multi-token prediction, not used for generation

    def sanitize(self, weights: dict) -> dict:
        """The original checkpoint names, renamed as transformers loads them."""
        renamed = {}
        for name, tensor in weights.items():
            for pattern, target in RENAMES:
                name = pattern.sub(target, name)
            renamed[name] = tensor
        return super().sanitize(renamed)


MODEL_TYPES = {"hy_v4": HYV4ForCausalLM}
