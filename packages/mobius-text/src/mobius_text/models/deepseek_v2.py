"""DeepSeek-V2: multi-head latent attention (MLA) and routed + shared experts.

MLA compresses keys and values into one latent per token: ``kv_a_proj_with_mqa``
makes ``[latent (kv_lora_rank) | k_rot (qk_rope_head_dim)]``, the latent is
RMS-normalised and expanded by ``kv_b_proj`` into per-head ``k_nope`` and values;
``k_rot`` is shared by all heads. As transformers does, the cache holds the
*compressed* latent and the rotated ``k_rot`` (one "head" each): ``key`` is
``[batch, 1, total, kv_lora_rank]`` and ``value`` is ``[batch, 1, total,
qk_rope_head_dim]``; every step re-expands the whole latent through ``kv_b_proj``.

The router returns a dense ``[tokens, experts]`` weight matrix, zero off each
token's top k; the experts (one module per expert, as checkpoints store them) run
on the tokens routed to them only (``mobius.components.moe``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    DecoderLayer,
    GatedMLP,
    Linear,
    RMSNorm,
    TransposedParameter,
    merge_heads,
    split_heads,
)
from mobius.components.moe import ExpertList, flatten_tokens, unflatten_tokens
from mobius.config import ArchitectureConfig
from mobius_text.models.llama import LlamaForCausalLM, LlamaModel

FLOAT = ir.DataType.FLOAT
# HF builds q_a_layernorm / kv_a_layernorm with the RMSNorm default eps, not rms_norm_eps.
LOW_RANK_NORM_EPS = 1e-6


@dataclass
class DeepseekMoEConfig(ArchitectureConfig):
    """The DeepSeek MoE layout and routing rule, shared by every family built on it."""

    moe_intermediate_size: int = 1407
    n_routed_experts: int = 64
    n_shared_experts: int = 0
    num_experts_per_tok: int = 6
    # One entry per layer: "dense" (a gated MLP) or "sparse" (the MoE block).
    mlp_layer_types: list[str] = field(default_factory=list)
    topk_method: str = "greedy"  # greedy | group_limited_greedy (V2) | noaux_tc (V3)
    n_group: int = 1
    topk_group: int = 1
    norm_topk_prob: bool = False
    routed_scaling_factor: float = 1.0

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        layers = fields["num_hidden_layers"]
        experts = getattr(hf_config, "n_routed_experts", None) or getattr(
            hf_config, "num_experts", None
        )
        if experts is None:  # a dense variant (Youtu): every layer a gated MLP
            return {**fields, "mlp_layer_types": ["dense"] * layers}
        first_dense = getattr(hf_config, "first_k_dense_replace", None) or 0
        mlp_layer_types = getattr(hf_config, "mlp_layer_types", None) or [
            "dense" if i < first_dense else "sparse" for i in range(layers)
        ]
        fields.update(
            moe_intermediate_size=hf_config.moe_intermediate_size,
            n_routed_experts=experts,
            n_shared_experts=getattr(hf_config, "n_shared_experts", None) or 0,
            num_experts_per_tok=hf_config.num_experts_per_tok,
            mlp_layer_types=list(mlp_layer_types),
            topk_method=getattr(hf_config, "topk_method", None) or "greedy",
            n_group=getattr(hf_config, "n_group", None) or 1,
            topk_group=getattr(hf_config, "topk_group", None) or 1,
            norm_topk_prob=bool(getattr(hf_config, "norm_topk_prob", False)),
            routed_scaling_factor=float(getattr(hf_config, "routed_scaling_factor", 1.0)),
        )
        return fields


@dataclass
class DeepseekV2Config(DeepseekMoEConfig):
    """MLA dimensions on top of the MoE layout (V2 routing: softmax, greedy or group-limited)."""

    q_lora_rank: int | None = None
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    # V2 rotates interleaved pairs in place; V3 (rope_interleave) de-interleaves them first.
    rope_layout: str = "interleaved"  # interleaved | deinterleaved | half | none
    softmax_scale: float = 1.0

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        qk_head_dim = hf_config.qk_nope_head_dim + hf_config.qk_rope_head_dim
        fields.update(
            head_dim=hf_config.qk_rope_head_dim,  # what RoPE spans, as HF sets it
            q_lora_rank=hf_config.q_lora_rank,
            kv_lora_rank=hf_config.kv_lora_rank,
            qk_nope_head_dim=hf_config.qk_nope_head_dim,
            qk_rope_head_dim=hf_config.qk_rope_head_dim,
            v_head_dim=hf_config.v_head_dim,
            norm_topk_prob=False,  # HF's V2 router never renormalises
            softmax_scale=mla_softmax_scale(hf_config.rope_parameters or {}, qk_head_dim),
        )
        return fields


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def mla_softmax_scale(rope_parameters: dict, qk_head_dim: int) -> float:
    """``qk_head_dim ** -0.5``, times ``mscale(factor, mscale_all_dim) ** 2`` for scaled RoPE.

    The cos/sin of YaRN already carry ``mscale / mscale_all_dim`` (the core's
    ``attention_factor``); DeepSeek moves the ``mscale_all_dim`` part into the softmax.
    """
    scale = qk_head_dim**-0.5
    if rope_parameters.get("rope_type", "default") != "default":
        mscale_all_dim = rope_parameters.get("mscale_all_dim", 0)
        if mscale_all_dim:
            scale *= yarn_mscale(rope_parameters["factor"], mscale_all_dim) ** 2
    return scale


def rotate(op, x: ir.Value, cos: ir.Value, sin: ir.Value, layout: str) -> ir.Value:
    """RoPE over all channels of ``x [batch, heads, seq, rope_dim]`` in DeepSeek's layouts.

    ``interleaved``: pairs (x0, x1), (x2, x3)... rotate in place (V2's complex product).
    ``deinterleaved``: the same pairs, written out as [evens | odds] (V3's ``rope_interleave``).
    ``half``: the Llama rotate-half layout. ``none``: no rotation (Kimi Linear's NoPE MLA).
    """
    if layout == "none":
        return x
    cos, sin = op.CastLike(cos, x), op.CastLike(sin, x)
    if layout == "deinterleaved":
        pairs = op.Reshape(x, op.Constant(value_ints=[0, 0, 0, -1, 2]))  # [b, h, s, d/2, 2]
        x = op.Reshape(
            op.Transpose(pairs, perm=[0, 1, 2, 4, 3]), op.Constant(value_ints=[0, 0, 0, -1])
        )  # [b, h, s, d]: evens then odds, then rotated as halves
    return op.RotaryEmbedding(x, cos, sin, interleaved=int(layout == "interleaved"))


class DeepseekV2Attention(nn.Module):
    """Multi-head latent attention; the cache holds the normalised latent and the rotated ``k_rot``."""

    def __init__(self, config: DeepseekV2Config) -> None:
        super().__init__()
        c = config
        self.num_heads = c.num_attention_heads
        self.nope, self.rope_dim, self.v_dim = c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
        self.kv_lora_rank = c.kv_lora_rank
        self.rope_layout, self.scale = c.rope_layout, c.softmax_scale
        qk_head_dim = self.nope + self.rope_dim
        if c.q_lora_rank is None:
            self.q_proj = Linear(c.hidden_size, self.num_heads * qk_head_dim)
        else:
            self.q_a_proj = Linear(c.hidden_size, c.q_lora_rank, c.attention_bias)
            self.q_a_layernorm = RMSNorm(c.q_lora_rank, LOW_RANK_NORM_EPS)
            self.q_b_proj = Linear(c.q_lora_rank, self.num_heads * qk_head_dim)
        self.kv_a_proj_with_mqa = Linear(
            c.hidden_size, c.kv_lora_rank + self.rope_dim, c.attention_bias
        )
        self.kv_a_layernorm = RMSNorm(c.kv_lora_rank, LOW_RANK_NORM_EPS)
        self.kv_b_proj = Linear(c.kv_lora_rank, self.num_heads * (self.nope + self.v_dim))
        self.o_proj = Linear(self.num_heads * self.v_dim, c.hidden_size, c.attention_bias)

    def query(self, op, x: ir.Value) -> ir.Value:
        if hasattr(self, "q_proj"):
            return self.q_proj(op, x)
        return self.q_b_proj(op, self.q_a_layernorm(op, self.q_a_proj(op, x)))

    def heads(self, op, x: ir.Value, dim: int) -> ir.Value:
        """``[batch, seq, heads*dim]`` → ``[batch, heads, seq, dim]``."""
        return split_heads(op, x, head_dim=dim)

    def scale_query(self, op, query: ir.Value, *extra: ir.Value) -> ir.Value:
        """The rotated query ``[b, H, s, nope + rope]`` before attention; ``extra``: what the
        model's rotary module returns beyond cos and sin (none here). A family with a
        position-dependent query scale (Mistral 4) overrides it."""
        return query

    def forward(self, op, x, position_embeddings, bias, past_latent, past_k_rot):
        cos, sin, *extra = position_embeddings
        q = self.heads(op, self.query(op, x), self.nope + self.rope_dim)
        q_nope, q_rot = op.Split(q, [self.nope, self.rope_dim], axis=-1, _outputs=2)
        q_rot = rotate(op, q_rot, cos, sin, self.rope_layout)
        query = self.scale_query(op, op.Concat(q_nope, q_rot, axis=-1), *extra)  # [b, H, s, qk]

        compressed = self.kv_a_proj_with_mqa(op, x)  # [b, s, kv_lora_rank + rope]
        latent, k_rot = op.Split(
            compressed, [self.kv_lora_rank, self.rope_dim], axis=-1, _outputs=2
        )
        latent = op.Unsqueeze(self.kv_a_layernorm(op, latent), [1])  # [b, 1, s, kv_lora_rank]
        k_rot = rotate(op, op.Unsqueeze(k_rot, [1]), cos, sin, self.rope_layout)  # [b, 1, s, rope]
        latent = op.Concat(past_latent, latent, axis=2)  # [b, 1, total, kv_lora_rank]
        k_rot = op.Concat(past_k_rot, k_rot, axis=2)  # [b, 1, total, rope]

        kv = self.heads(op, self.kv_b_proj(op, op.Squeeze(latent, [1])), self.nope + self.v_dim)
        k_nope, value = op.Split(kv, [self.nope, self.v_dim], axis=-1, _outputs=2)
        k_rot_heads = op.Expand(
            k_rot,
            op.Concat(op.Shape(k_nope, end=-1), op.Constant(value_ints=[self.rope_dim]), axis=0),
        )  # [b, H, total, rope]
        key = op.Concat(k_nope, k_rot_heads, axis=-1)  # [b, H, total, nope + rope]

        y = op.Attention(query, key, value, bias, scale=self.scale)  # [b, H, s, v]
        return self.output(op, y, x), (latent, k_rot)

    def output(self, op, y: ir.Value, x: ir.Value) -> ir.Value:
        """``o_proj`` of the heads ``y [b, H, s, v]``; ``x``: the layer input, for a family
        that gates the heads with it (Bailing hybrid)."""
        return self.o_proj(op, merge_heads(op, y))


class DeepseekV2Router(nn.Module):
    """Top-k routing in float32; returns the dense ``[tokens, experts]`` weight matrix.

    ``greedy``: top-k of the softmax. ``group_limited_greedy``: experts outside the
    ``topk_group`` groups with the highest max score are zeroed first. ``noaux_tc``
    (V3): sigmoid scores; groups ranked by the sum of their two best bias-corrected
    scores; experts chosen on the corrected scores, weighted by the raw ones.
    """

    def __init__(self, config: DeepseekMoEConfig, owns_correction_bias: bool = True) -> None:
        super().__init__()
        c = config
        self.weight = TransposedParameter(c.n_routed_experts, c.hidden_size)
        if c.topk_method == "noaux_tc" and owns_correction_bias:
            self.e_score_correction_bias = nn.Parameter([c.n_routed_experts])
        self.method, self.top_k = c.topk_method, c.num_experts_per_tok
        self.num_experts, self.n_group, self.topk_group = (
            c.n_routed_experts,
            c.n_group,
            c.topk_group,
        )
        self.norm_topk_prob, self.scaling = c.norm_topk_prob, c.routed_scaling_factor

    def top(self, op, x: ir.Value, k: int) -> tuple[ir.Value, ir.Value]:
        return op.TopK(x, op.Constant(value_ints=[k]), axis=-1, _outputs=2)

    def group_mask(self, op, group_scores: ir.Value) -> ir.Value:
        """``[tokens, groups]`` scores → bool ``[tokens, experts]``, true in the best groups."""
        _, groups = self.top(op, group_scores, self.topk_group)
        ones = op.CastLike(op.Expand(op.Constant(value_float=1.0), op.Shape(groups)), group_scores)
        mask = op.ScatterElements(op.ConstantOfShape(op.Shape(group_scores)), groups, ones, axis=1)
        mask = op.Expand(
            op.Unsqueeze(mask, [-1]),
            op.Constant(value_ints=[1, self.n_group, self.num_experts // self.n_group]),
        )
        return op.Cast(op.Reshape(mask, op.Constant(value_ints=[0, -1])), to=ir.DataType.BOOL)

    def per_group(self, op, scores: ir.Value) -> ir.Value:
        """``[tokens, experts]`` → ``[tokens, groups, experts per group]``."""
        return op.Reshape(scores, op.Constant(value_ints=[0, self.n_group, -1]))

    def forward(self, op, x: ir.Value, correction_bias: ir.Value | None = None) -> ir.Value:
        """``x [N, hidden]`` → routing weights ``[N, E]`` (float32, zero off the top k).

        ``correction_bias``: the ``noaux_tc`` bias when the checkpoint keeps it outside the router.
        """
        logits = op.MatMul(op.Cast(x, to=FLOAT), op.Cast(self.weight, to=FLOAT))  # [N, E]
        if self.method == "noaux_tc":
            if correction_bias is None:
                correction_bias = self.e_score_correction_bias
            scores = op.Sigmoid(logits)
            choice = op.Add(scores, op.Cast(correction_bias, to=FLOAT))
            best_two, _ = self.top(op, self.per_group(op, choice), 2)
            mask = self.group_mask(op, op.ReduceSum(best_two, [-1], keepdims=0))
            _, experts = self.top(op, op.Where(mask, choice, float("-inf")), self.top_k)
            weights = op.GatherElements(scores, experts, axis=1)
        else:
            scores = op.Softmax(logits, axis=-1)
            if self.method == "group_limited_greedy":
                mask = self.group_mask(
                    op, op.ReduceMax(self.per_group(op, scores), [-1], keepdims=0)
                )
                scores = op.Where(mask, scores, 0.0)
            elif self.method != "greedy":
                raise ValueError(f"unsupported topk_method {self.method!r}")
            weights, experts = self.top(op, scores, self.top_k)
        if self.norm_topk_prob:
            weights = op.Div(weights, op.Add(op.ReduceSum(weights, [-1], keepdims=1), 1e-20))
        weights = op.Mul(weights, self.scaling)
        return op.ScatterElements(op.ConstantOfShape(op.Shape(scores)), experts, weights, axis=1)


class DeepseekV2MoE(nn.Module):
    """Routed experts (gated MLPs, each run on the tokens routed to it) plus always-on shared experts."""

    def __init__(self, config: DeepseekMoEConfig) -> None:
        super().__init__()
        c = config
        self.gate = DeepseekV2Router(c)
        self.experts = ExpertList(
            [
                GatedMLP(c.hidden_size, c.moe_intermediate_size, c.hidden_act)
                for _ in range(c.n_routed_experts)
            ]
        )
        self.shared_experts = (
            GatedMLP(
                c.hidden_size,
                c.moe_intermediate_size * c.n_shared_experts,
                c.hidden_act,
                c.mlp_bias,
            )
            if c.n_shared_experts
            else None
        )
        self.hidden = c.hidden_size

    def route(self, op, flat: ir.Value) -> ir.Value:
        return self.gate(op, flat)

    def forward(self, op, x: ir.Value) -> ir.Value:
        flat = flatten_tokens(op, x, self.hidden)  # [N, hidden]
        out = unflatten_tokens(op, self.experts.dispatch(op, flat, self.route(op, flat)), x)
        if self.shared_experts is not None:
            out = op.Add(out, self.shared_experts(op, x))
        return out


class DeepseekV2Model(LlamaModel):
    """Dense MLPs where ``mlp_layer_types`` says "dense" (the first ``first_k_dense_replace``), MoE after."""

    def make_attention(self, config, layer_idx):
        return DeepseekV2Attention(config)

    def make_mlp(self, config, layer_idx):
        if config.mlp_layer_types[layer_idx] == "sparse":
            return DeepseekV2MoE(config)
        return GatedMLP(
            config.hidden_size, config.intermediate_size, config.hidden_act, config.mlp_bias
        )

    def make_layer(self, config, layer_idx):
        return DecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=self.make_mlp(config, layer_idx),
            input_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
            post_attention_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
        )


class DeepseekV2ForCausalLM(LlamaForCausalLM):
    """DeepSeek-V2 causal LM; the cache per layer is (latent, k_rot), one head each."""

    config_class = DeepseekV2Config
    model_class = DeepseekV2Model

    def kv_cache_shapes(self) -> list[tuple[int, int, int]]:
        c = self.config
        return [(1, c.kv_lora_rank, c.qk_rope_head_dim)] * c.num_hidden_layers


MODEL_TYPES = {"deepseek_v2": DeepseekV2ForCausalLM}
