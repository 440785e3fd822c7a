"""DeepSeek-V4: shared-KV attention over a sliding window plus compressed long-range
entries, hash-routed and top-k-routed experts, Sinkhorn hyper-connections.

Attention (``self_attn``): one key/value head (``kv_proj`` → RMSNorm, read as both key
and value), queries from a low-rank ``q_a_proj`` → ``q_a_norm`` → ``q_b_proj`` and a
per-head weightless RMSNorm; interleaved RoPE on the *last* ``qk_rope_head_dim``
channels; one learned sink logit per head; the output's rotated channels are rotated
back (``-sin``) at the query position, then the heads go through a grouped low-rank
projection (``o_a_proj``, one block per group of heads) and ``o_b_proj``.

``layer_types`` picks what the keys are besides the ``sliding_window`` latest tokens:

- ``heavily_compressed_attention``: every window of ``rate`` tokens is pooled into one
  entry (``compressor``: a softmax over the window of ``gate_proj(x) + position_bias``
  weighting ``kv_proj(x)``, RMS-normalised, rotated at position ``window * rate``). A
  query sees the entries of windows that closed before it (``(pos + 1) // rate``) —
  during one-token decode, as transformers does, every closed window;
- ``compressed_sparse_attention``: entries pool two overlapping series (the previous
  window's first half of the projection with this window's second half), and a lightning
  indexer (``compressor.indexer``, its own compressor at ``index_head_dim``) keeps the
  ``index_topk`` best closed entries per query;
- ``sliding_attention`` layers use the ``main`` RoPE, the others the ``compress`` one.

The cache keeps, per token, the rotated key (``key``) and the compressors' projections
(``compress_kv`` / ``compress_gate``, and ``index_kv`` / ``index_gate`` for the indexer);
the closed windows are pooled again at every step (transformers keeps the pooled entries
and a remainder buffer instead: the same numbers, without a graph-side state machine).
The sliding window is applied by the mask, so ``key`` spans the whole sequence.

MoE (``mlp``): ``sqrt(softplus(logits))`` scores; ``hash_moe`` layers take the experts
from the checkpoint's ``gate.tid2eid[input_ids]``, ``moe`` layers the top-k of the
bias-corrected scores; the weights are renormalised and scaled; routed and shared
experts use a clamped SwiGLU. Checkpoints keep the original names (``attn.wq_a``,
``ffn.experts.{e}.w1``...): :meth:`DeepseekV4ForCausalLM.sanitize` applies transformers'
renames and stacks the experts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    GatedMLP,
    Linear,
    RMSNorm,
    TransposedParameter,
    WeightlessRMSNorm,
    attention_bias,
    lowest_value,
    make_rotary_embedding,
    merge_heads,
    split_heads,
)
from mobius.components.moe import flatten_tokens, stack_expert_weights, unflatten_tokens
from mobius.config import ArchitectureConfig, RopeConfig
from mobius_text.models._hyper_connections import (
    HyperConnection,
    HyperHead,
    expand,
    expand_embeddings,
)
from mobius_text.models.hy_v4 import HYV4Experts, clamped_swiglu
from mobius_text.models.llama import LlamaForCausalLM

FLOAT = ir.DataType.FLOAT
SPARSE, HEAVY = "compressed_sparse_attention", "heavily_compressed_attention"


@dataclass
class DeepseekV4Config(ArchitectureConfig):
    """The attention, compression, hyper-connection and MoE settings of DeepSeek-V4."""

    q_lora_rank: int = 1024
    qk_rope_head_dim: int = 64
    o_groups: int = 8
    o_lora_rank: int = 1024
    rope_compress: RopeConfig = field(default_factory=RopeConfig)
    compress_rates: dict[str, int] = field(default_factory=dict)
    index_n_heads: int = 64
    index_head_dim: int = 128
    index_topk: int = 512
    hc_mult: int = 4
    hc_sinkhorn_iters: int = 20
    hc_eps: float = 1e-6
    mlp_layer_types: list[str] = field(default_factory=list)
    moe_intermediate_size: int = 2048
    n_routed_experts: int = 256
    num_experts_per_tok: int = 6
    scoring_func: str = "sqrtsoftplus"
    routed_scaling_factor: float = 1.5
    swiglu_limit: float = 10.0

    @classmethod
    def hf_fields(cls, hf_config):
        def rope(label):
            return RopeConfig.from_hf(
                SimpleNamespace(rope_parameters=hf_config.rope_parameters[label])
            )

        fields = super().hf_fields(hf_config)
        fields.update(
            rope=rope("main"),
            rope_compress=rope("compress"),
            q_lora_rank=hf_config.q_lora_rank,
            qk_rope_head_dim=hf_config.qk_rope_head_dim,
            o_groups=hf_config.o_groups,
            o_lora_rank=hf_config.o_lora_rank,
            compress_rates=dict(hf_config.compress_rates),
            index_n_heads=hf_config.index_n_heads,
            index_head_dim=hf_config.index_head_dim,
            index_topk=hf_config.index_topk,
            hc_mult=hf_config.hc_mult,
            hc_sinkhorn_iters=hf_config.hc_sinkhorn_iters,
            hc_eps=float(hf_config.hc_eps),
            mlp_layer_types=list(hf_config.mlp_layer_types),
            moe_intermediate_size=hf_config.moe_intermediate_size,
            n_routed_experts=hf_config.n_routed_experts,
            num_experts_per_tok=hf_config.num_experts_per_tok,
            scoring_func=hf_config.scoring_func,
            routed_scaling_factor=float(hf_config.routed_scaling_factor),
            swiglu_limit=float(hf_config.swiglu_limit),
        )
        return fields


def rotate_tail(op, x: ir.Value, cos: ir.Value, sin: ir.Value, rope_dim: int, dim: int):
    """Interleaved-pair RoPE on the last ``rope_dim`` channels of ``x [b, h, s, dim]``."""
    nope, rope = op.Split(x, [dim - rope_dim, rope_dim], axis=-1, _outputs=2)
    rope = op.RotaryEmbedding(rope, op.CastLike(cos, x), op.CastLike(sin, x), interleaved=1)
    return op.Concat(nope, rope, axis=-1)


def scores_mask(op, visible: ir.Value, like: ir.Value) -> ir.Value:
    """``0`` where ``visible``, the lowest float elsewhere, in the dtype of ``like``."""
    np_dtype = like.dtype.numpy()
    lowest = op.Constant(value=ir.tensor(np.array(lowest_value(like.dtype), dtype=np_dtype)))
    zero = op.Constant(value=ir.tensor(np.array(0, dtype=np_dtype)))
    return op.Where(visible, zero, lowest)


def closed_windows(op, position_ids: ir.Value, rate: int, count: ir.Value) -> ir.Value:
    """Bool ``[b, s, count]``: entry ``w`` closed before the query, ``w < (pos + 1) // rate``."""
    threshold = op.Div(op.Add(position_ids, 1), op.Constant(value_ints=[rate]))
    entries = op.Range(0, op.Squeeze(count, [0]), 1)  # [count]
    return op.Less(entries, op.Unsqueeze(threshold, [-1]))


class WindowPooling(nn.Module):
    """Pools each closed window of ``rate`` tokens into one rotated key ``[dim]``.

    Holds ``kv_proj``, ``gate_proj``, ``position_bias [rate, width]`` and ``kv_norm``.
    ``overlap`` (CSA): the projections are ``2 * dim`` wide and entry ``w`` pools the
    previous window's first halves with window ``w``'s second halves over ``2 * rate``
    slots (window 0's previous half is empty: zero values, ``-inf`` gates).
    The methods run inside the owner's ``forward``, so the weights keep its name.
    """

    def __init__(self, hidden: int, dim: int, rate: int, overlap: bool, eps: float) -> None:
        super().__init__()
        self.width = 2 * dim if overlap else dim
        self.kv_proj = Linear(hidden, self.width)
        self.gate_proj = Linear(hidden, self.width)
        self.position_bias = nn.Parameter([rate, self.width])
        self.kv_norm = RMSNorm(dim, eps)
        self.dim, self.rate, self.overlap = dim, rate, overlap

    def project(self, op, x: ir.Value, past_kv: ir.Value, past_gate: ir.Value):
        """Every token's ``kv`` and ``gate`` projections ``[b, 1, total, width]`` (the cache)."""
        kv = op.Concat(past_kv, op.Unsqueeze(self.kv_proj(op, x), [1]), axis=2)
        return kv, op.Concat(past_gate, op.Unsqueeze(self.gate_proj(op, x), [1]), axis=2)

    def pool(self, op, kv: ir.Value, gate: ir.Value, rotary, rope_dim: int) -> ir.Value:
        """``kv``, ``gate [b, 1, total, width]`` → entries ``[b, 1, total // rate, dim]``."""
        windows = op.Div(op.Shape(kv, start=2, end=3), op.Constant(value_ints=[self.rate]))
        usable = op.Mul(windows, op.Constant(value_ints=[self.rate]))
        shape = op.Constant(value_ints=[0, -1, self.rate, self.width])

        def chunks(t):  # [b, windows, rate, width]
            return op.Reshape(op.Slice(t, op.Constant(value_ints=[0]), usable, [2]), shape)

        kv, gate = chunks(kv), op.Add(chunks(gate), op.CastLike(self.position_bias, gate))
        if self.overlap:
            kv = self.overlapped(op, kv, windows, 0.0)
            gate = self.overlapped(op, gate, windows, -np.inf)
        weights = op.Softmax(op.Cast(gate, to=FLOAT), axis=2)
        pooled = op.ReduceSum(op.Mul(kv, op.CastLike(weights, kv)), [2], keepdims=0)
        entries = op.Unsqueeze(self.kv_norm(op, pooled), [1])  # [b, 1, windows, dim]
        positions = op.Mul(op.Range(0, op.Squeeze(windows, [0]), 1), self.rate)
        positions = op.Expand(
            op.Unsqueeze(positions, [0]), op.Concat(op.Shape(kv, end=1), windows, axis=0)
        )
        cos, sin = rotary(op, positions)  # [b, windows, rope/2]
        return rotate_tail(op, entries, cos, sin, rope_dim, self.dim)

    def overlapped(self, op, x: ir.Value, windows: ir.Value, empty: float) -> ir.Value:
        """``[b, w, rate, 2 * dim]`` → ``[b, w, 2 * rate, dim]``: previous first halves, own second."""
        first, second = op.Split(x, [self.dim, self.dim], axis=-1, _outputs=2)
        pad_shape = op.Concat(
            op.Shape(x, end=1), op.Constant(value_ints=[1, self.rate, self.dim]), axis=0
        )
        pad = op.Expand(op.CastLike(op.Constant(value_float=empty), x), pad_shape)
        previous = op.Slice(
            op.Concat(pad, first, axis=1), op.Constant(value_ints=[0]), windows, [1]
        )
        return op.Concat(previous, second, axis=2)


class IndexerScorer(nn.Module):
    """``sum_h weights_proj(x)_h / sqrt(H) * relu(q_h · k) / sqrt(d)`` → ``[b, s, entries]``."""

    def __init__(self, hidden: int, heads: int, dim: int) -> None:
        super().__init__()
        self.weights_proj = Linear(hidden, heads)
        self.heads, self.dim = heads, dim

    def forward(self, op, q: ir.Value, keys: ir.Value, x: ir.Value) -> ir.Value:
        keys = op.Transpose(op.Cast(keys, to=FLOAT), perm=[0, 1, 3, 2])  # [b, 1, d, T]
        scores = op.Mul(op.Relu(op.MatMul(op.Cast(q, to=FLOAT), keys)), self.dim**-0.5)
        weights = op.Mul(op.Cast(self.weights_proj(op, x), to=FLOAT), self.heads**-0.5)
        weights = op.Unsqueeze(op.Transpose(weights, perm=[0, 2, 1]), [-1])  # [b, H, s, 1]
        return op.ReduceSum(op.Mul(scores, weights), [1], keepdims=0)  # [b, s, T]


class DeepseekV4Indexer(WindowPooling):
    """Lightning indexer: its own overlapping pooled keys at ``index_head_dim``, scored per query."""

    def __init__(self, config: DeepseekV4Config) -> None:
        c = config
        rate = c.compress_rates[SPARSE]
        super().__init__(c.hidden_size, c.index_head_dim, rate, True, c.rms_norm_eps)
        self.q_b_proj = Linear(c.q_lora_rank, c.index_n_heads * c.index_head_dim)
        self.scorer = IndexerScorer(c.hidden_size, c.index_n_heads, c.index_head_dim)
        self.top_k, self.rope_dim = c.index_topk, c.qk_rope_head_dim

    def forward(self, op, x, q_resid, position_ids, rotary, past_kv, past_gate):
        """Bool ``[b, 1, s, entries]`` (closed entries among each query's top k), and the cache."""
        kv, gate = self.project(op, x, past_kv, past_gate)
        keys = self.pool(op, kv, gate, rotary, self.rope_dim)  # [b, 1, T, d]
        cos, sin = rotary(op, position_ids)
        q = split_heads(op, self.q_b_proj(op, q_resid), head_dim=self.dim)
        q = rotate_tail(op, q, cos, sin, self.rope_dim, self.dim)  # [b, H, s, d]
        index = self.scorer(op, q, keys, x)  # [b, s, T]
        count = op.Shape(keys, start=2, end=3)
        closed = closed_windows(op, position_ids, self.rate, count)
        index = op.Concat(op.Where(closed, index, -np.inf), self.empty_column(op, index), axis=-1)
        # The extra -inf column keeps k >= 1 (TopK takes no k = 0 before a window closes).
        # Top-k ties: -inf ties only among entries that are not kept either way.
        k = op.Max(op.Min(op.Constant(value_ints=[self.top_k]), count), op.Constant(value_ints=[1]))
        _, chosen = op.TopK(index, k, axis=-1, _outputs=2)
        ones = op.Expand(op.Constant(value_float=1.0), op.Shape(chosen))
        picked = op.ScatterElements(op.ConstantOfShape(op.Shape(index)), chosen, ones, axis=-1)
        picked = op.Slice(picked, op.Constant(value_ints=[0]), count, [2])
        return op.Unsqueeze(op.And(op.Cast(picked, to=ir.DataType.BOOL), closed), [1]), (kv, gate)

    def empty_column(self, op, index: ir.Value) -> ir.Value:
        shape = op.Concat(op.Shape(index, end=2), op.Constant(value_ints=[1]), axis=0)
        return op.Expand(op.Constant(value_float=-np.inf), shape)


class DeepseekV4Compressor(WindowPooling):
    """The long-range entries of a CSA / HCA layer and which of them each query sees."""

    def __init__(self, config: DeepseekV4Config, kind: str) -> None:
        c = config
        rate = c.compress_rates[kind]
        super().__init__(c.hidden_size, c.head_dim, rate, kind == SPARSE, c.rms_norm_eps)
        self.indexer = DeepseekV4Indexer(c) if kind == SPARSE else None
        self.rope_dim = c.qk_rope_head_dim

    def forward(self, op, x, q_resid, position_ids, rotary, *past):
        """Entries ``[b, 1, T, D]``, bool ``[b, 1, s, T]`` visibility, and the cache tensors."""
        kv, gate = self.project(op, x, *past[:2])
        entries = self.pool(op, kv, gate, rotary, self.rope_dim)
        if self.indexer is not None:
            visible, index_state = self.indexer(op, x, q_resid, position_ids, rotary, *past[2:])
            return entries, visible, (kv, gate, *index_state)
        count = op.Shape(entries, start=2, end=3)
        closed = op.Unsqueeze(closed_windows(op, position_ids, self.rate, count), [1])
        # A one-token step sees every closed window, as transformers does.
        one_token = op.Equal(op.Shape(x, start=1, end=2), op.Constant(value_ints=[1]))
        return entries, op.Or(closed, one_token), (kv, gate)


class DeepseekV4Attention(nn.Module):
    """Shared-KV attention with sinks over the window and, per layer type, compressed entries."""

    def __init__(self, config: DeepseekV4Config, layer_idx: int) -> None:
        super().__init__()
        c = config
        kind = c.layer_types[layer_idx]
        heads, dim = c.num_attention_heads, c.head_dim
        self.q_a_proj = Linear(c.hidden_size, c.q_lora_rank)
        self.q_a_norm = RMSNorm(c.q_lora_rank, c.rms_norm_eps)
        self.q_b_proj = Linear(c.q_lora_rank, heads * dim)
        self.q_b_norm = WeightlessRMSNorm(dim, c.rms_norm_eps)
        self.kv_proj = Linear(c.hidden_size, dim)
        self.kv_norm = RMSNorm(dim, c.rms_norm_eps)
        self.o_a_proj = GroupedLinear(heads * dim // c.o_groups, c.o_groups, c.o_lora_rank)
        self.o_b_proj = Linear(c.o_groups * c.o_lora_rank, c.hidden_size)
        self.sinks = nn.Parameter([heads])
        self.compressor = DeepseekV4Compressor(c, kind) if kind in (SPARSE, HEAVY) else None
        self.heads, self.dim, self.rope_dim = heads, dim, c.qk_rope_head_dim

    def forward(self, op, x, rope, bias, position_ids, past_key, *past_compressed):
        rotary, (cos, sin) = rope
        q_resid = self.q_a_norm(op, self.q_a_proj(op, x))
        q = self.q_b_norm(op, split_heads(op, self.q_b_proj(op, q_resid), head_dim=self.dim))
        q = rotate_tail(op, q, cos, sin, self.rope_dim, self.dim)  # [b, H, s, D]
        kv = op.Unsqueeze(self.kv_norm(op, self.kv_proj(op, x)), [1])
        kv = op.Concat(past_key, rotate_tail(op, kv, cos, sin, self.rope_dim, self.dim), axis=2)
        keys, present = kv, (kv,)  # [b, 1, total, D]: key and value at once
        if self.compressor is not None:
            entries, visible, state = self.compressor(
                op, x, q_resid, position_ids, rotary, *past_compressed
            )
            keys, present = op.Concat(kv, entries, axis=2), (kv, *state)
            bias = op.Concat(bias, scores_mask(op, visible, bias), axis=-1)
        y = self.attend(op, q, keys, bias)  # [b, H, s, D]
        y = rotate_tail(op, y, cos, op.Neg(sin), self.rope_dim, self.dim)
        return self.o_b_proj(op, self.o_a_proj(op, merge_heads(op, y))), present

    def attend(self, op, q, keys, bias):
        """``softmax([q·kᵀ/sqrt(D) + bias, sink])`` without the sink column, times the keys."""
        scores = op.Mul(op.MatMul(q, op.Transpose(keys, perm=[0, 1, 3, 2])), self.dim**-0.5)
        scores = op.Add(scores, bias)  # [b, H, s, total]
        sink_shape = op.Concat(op.Shape(scores, end=3), op.Constant(value_ints=[1]), axis=0)
        sinks = op.Reshape(op.CastLike(self.sinks, scores), op.Constant(value_ints=[1, -1, 1, 1]))
        probs = op.Softmax(op.Concat(scores, op.Expand(sinks, sink_shape), axis=-1), axis=-1)
        return op.MatMul(op.Slice(probs, [0], [-1], [3]), keys)


class GroupedLinear(nn.Module):
    """Block-diagonal projection: each of ``groups`` slices of the input has its own block.

    ``weight [groups * rank, in_per_group]`` as checkpoints store it (rows of group ``g``
    first); ``[b, s, groups * in_per_group]`` → ``[b, s, groups * rank]``.
    """

    def __init__(self, in_per_group: int, groups: int, rank: int) -> None:
        super().__init__()
        self.weight = TransposedParameter(groups * rank, in_per_group)  # [in, groups * rank]
        self.groups, self.rank, self.in_per_group = groups, rank, in_per_group

    def forward(self, op, x: ir.Value) -> ir.Value:
        g, rank, width = self.groups, self.rank, self.in_per_group
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, g, 1, width]))  # [b, s, g, 1, in]
        blocks = op.Reshape(self.weight, op.Constant(value_ints=[width, g, rank]))
        blocks = op.Transpose(blocks, perm=[1, 0, 2])  # [g, in, rank]
        return op.Reshape(op.MatMul(x, blocks), op.Constant(value_ints=[0, 0, -1]))


def clamped_gated_mlp(op, mlp: GatedMLP, x: ir.Value, limit: float) -> ir.Value:
    """``down(act(min(gate(x), limit)) * clip(up(x), -limit, limit))``."""
    h = clamped_swiglu(op, mlp.act, mlp.gate_proj(op, x), mlp.up_proj(op, x), limit)
    return mlp.down_proj(op, h)


class ClampedGatedMLP(GatedMLP):
    """The shared expert: a gated MLP with the clamped SwiGLU of the routed experts."""

    def __init__(self, hidden: int, inter: int, act: str, limit: float) -> None:
        super().__init__(hidden, inter, act)
        self.limit = limit

    def forward(self, op, x: ir.Value) -> ir.Value:
        return clamped_gated_mlp(op, self, x, self.limit)


class DeepseekV4Router(nn.Module):
    """Routing weights ``[tokens, experts]`` (float32, zero off the chosen experts).

    ``hashed``: the experts are ``tid2eid[input_ids]`` (repeats add up, as transformers'
    expert loop does); else the top k of the scores plus ``e_score_correction_bias``.
    """

    def __init__(self, config: DeepseekV4Config, hashed: bool) -> None:
        super().__init__()
        c = config
        self.weight = TransposedParameter(c.n_routed_experts, c.hidden_size)
        if hashed:
            self.tid2eid = nn.Parameter([c.vocab_size, c.num_experts_per_tok], ir.DataType.INT64)
        else:
            self.e_score_correction_bias = nn.Parameter([c.n_routed_experts])
        self.hashed, self.top_k, self.scoring = hashed, c.num_experts_per_tok, c.scoring_func
        self.scaling = c.routed_scaling_factor

    def score(self, op, logits: ir.Value) -> ir.Value:
        if self.scoring == "sqrtsoftplus":
            return op.Sqrt(op.Softplus(logits))
        if self.scoring == "sigmoid":
            return op.Sigmoid(logits)
        if self.scoring == "softmax":
            return op.Softmax(logits, axis=-1)
        raise ValueError(f"unsupported scoring_func {self.scoring!r}")

    def forward(self, op, x: ir.Value, input_ids: ir.Value) -> ir.Value:
        scores = self.score(op, op.MatMul(op.Cast(x, to=FLOAT), op.Cast(self.weight, to=FLOAT)))
        if self.hashed:
            ids = op.Reshape(input_ids, op.Constant(value_ints=[-1]))
            experts = op.Gather(self.tid2eid, ids, axis=0)  # [tokens, k]
        else:
            choice = op.Add(scores, op.Cast(self.e_score_correction_bias, to=FLOAT))
            _, experts = op.TopK(choice, op.Constant(value_ints=[self.top_k]), axis=-1, _outputs=2)
        weights = op.GatherElements(scores, experts, axis=1)
        total = op.Add(op.ReduceSum(weights, [-1], keepdims=1), op.Constant(value_float=1e-20))
        weights = op.Mul(op.Div(weights, total), op.Constant(value_float=self.scaling))
        zeros = op.ConstantOfShape(op.Shape(scores))
        return op.ScatterElements(zeros, experts, weights, axis=1, reduction="add")


class DeepseekV4MoE(nn.Module):
    """Routed experts (fused, clamped SwiGLU) plus one clamped shared expert."""

    def __init__(self, config: DeepseekV4Config, hashed: bool) -> None:
        super().__init__()
        c = config
        inter = c.moe_intermediate_size
        self.gate = DeepseekV4Router(c, hashed)
        self.experts = HYV4Experts(c.n_routed_experts, c.hidden_size, inter, c.swiglu_limit)
        self.shared_experts = ClampedGatedMLP(c.hidden_size, inter, c.hidden_act, c.swiglu_limit)
        self.hidden = c.hidden_size

    def forward(self, op, x: ir.Value, input_ids: ir.Value) -> ir.Value:
        flat = flatten_tokens(op, x, self.hidden)  # [tokens, hidden]
        routed = self.experts(op, flat, self.gate(op, flat, input_ids))
        return op.Add(unflatten_tokens(op, routed, x), self.shared_experts(op, x))


class DeepseekV4DecoderLayer(nn.Module):
    """Attention and MoE blocks over ``hc_mult`` streams mixed by Sinkhorn hyper-connections."""

    def __init__(self, config: DeepseekV4Config, layer_idx: int) -> None:
        super().__init__()
        c = config
        self.self_attn = DeepseekV4Attention(c, layer_idx)
        self.mlp = DeepseekV4MoE(c, c.mlp_layer_types[layer_idx] == "hash_moe")
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        hc = dict(
            norm_eps=c.rms_norm_eps,
            hc_eps=c.hc_eps,
            sinkhorn_iterations=c.hc_sinkhorn_iters,
            norm_first=True,
        )
        self.attn_hc = HyperConnection(c.hc_mult, c.hidden_size, **hc)
        self.ffn_hc = HyperConnection(c.hc_mult, c.hidden_size, **hc)

    def forward(self, op, streams, rope, bias, position_ids, input_ids, *past):
        post, comb, x = self.attn_hc(op, streams)
        h, present = self.self_attn(
            op, self.input_layernorm(op, x), rope, bias, position_ids, *past
        )
        streams = expand(op, streams, h, post, comb)
        post, comb, x = self.ffn_hc(op, streams)
        h = self.mlp(op, self.post_attention_layernorm(op, x), input_ids)
        return expand(op, streams, h, post, comb), present


class DeepseekV4Model(nn.Module):
    """Embeddings copied onto the streams, the layers, ``hc_head`` and the final norm."""

    def __init__(self, config: DeepseekV4Config) -> None:
        super().__init__()
        c = self.config = config
        self.embed_tokens = Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(
            [DeepseekV4DecoderLayer(c, i) for i in range(c.num_hidden_layers)]
        )
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.hc_head = HyperHead(
            c.hc_mult, c.hidden_size, norm_eps=c.rms_norm_eps, hc_eps=c.hc_eps, norm_first=True
        )
        self.rotary = {
            "main": make_rotary_embedding(c.rope, c.head_dim, c.max_position_embeddings),
            "compress": make_rotary_embedding(
                c.rope_compress, c.head_dim, c.max_position_embeddings
            ),
        }

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        c = self.config
        x = self.embed_tokens(op, input_ids)  # [b, s, hidden]
        seq_len = op.Squeeze(op.Slice(op.Shape(input_ids), [1], [2]), [0])
        bias = attention_bias(op, attention_mask, seq_len, x.dtype, c.sliding_window)
        ropes = {label: (rotary, rotary(op, position_ids)) for label, rotary in self.rotary.items()}
        streams = expand_embeddings(op, x, c.hc_mult)  # [b, s, n, hidden]
        presents = []
        for i, (layer, past) in enumerate(zip(self.layers, past_key_values, strict=True)):
            rope = ropes["main" if c.layer_types[i] == "sliding_attention" else "compress"]
            streams, present = layer(op, streams, rope, bias, position_ids, input_ids, *past)
            presents.append(present)
        return self.norm(op, self.hc_head(op, streams)), presents


# transformers' renames of the original checkpoint names, in its order (names without
# the ``model.`` prefix that transformers' own saves add).
RENAMES = [
    (re.compile(pattern), target)
    for pattern, target in [
        (r"\.attn\.", ".self_attn."),
        (r"\.ffn\.", ".mlp."),
        (r"\.indexer\.compressor\.", ".compressor.indexer."),
        (r"^embed\.weight", "embed_tokens.weight"),
        (r"^head\.weight", "lm_head.weight"),
        (r"^hc_head_(fn|base|scale)", r"hc_head.hc_\1"),
        (r"\.attn_norm\.", ".input_layernorm."),
        (r"\.ffn_norm\.", ".post_attention_layernorm."),
        (r"\.hc_attn_(fn|base|scale)", r".attn_hc.\1"),
        (r"\.hc_ffn_(fn|base|scale)", r".ffn_hc.\1"),
        (r"\.attn_sink", ".sinks"),
        (r"\.indexer\.weights_proj\.", ".compressor.indexer.scorer.weights_proj."),
        (r"\.indexer\.wq_b\.", ".compressor.indexer.q_b_proj."),
        (r"\.norm\.", ".kv_norm."),
        (r"\.ape", ".position_bias"),
        (r"\.wq_a\.", ".q_a_proj."),
        (r"\.self_attn\.wq_b\.", ".self_attn.q_b_proj."),
        (r"\.wkv\.", ".kv_proj."),
        (r"\.wgate\.", ".gate_proj."),
        (r"\.wo_a\.", ".o_a_proj."),
        (r"\.wo_b\.", ".o_b_proj."),
        (r"\.q_norm\.", ".q_a_norm."),
        (r"\.gate\.bias", ".gate.e_score_correction_bias"),
        (r"\.shared_experts\.w1\.", ".shared_experts.gate_proj."),
        (r"\.shared_experts\.w2\.", ".shared_experts.down_proj."),
        (r"\.shared_experts\.w3\.", ".shared_experts.up_proj."),
    ]
]


class DeepseekV4ForCausalLM(LlamaForCausalLM):
    """DeepSeek-V4 causal LM (HF ``DeepseekV4ForCausalLM``)."""

    config_class = DeepseekV4Config
    model_class = DeepseekV4Model
    ignored = ("model.mtp.*",)  # multi-token prediction, not used for generation

    def cache_layout(self):
        c = self.config
        layout = []
        for kind in c.layer_types:
            layer = [("key", ["batch", 1, "past_sequence", c.head_dim])]
            if kind in (SPARSE, HEAVY):
                width = 2 * c.head_dim if kind == SPARSE else c.head_dim
                layer += [
                    (name, ["batch", 1, "past_sequence", width])
                    for name in ("compress_kv", "compress_gate")
                ]
            if kind == SPARSE:
                layer += [
                    (name, ["batch", 1, "past_sequence", 2 * c.index_head_dim])
                    for name in ("index_kv", "index_gate")
                ]
            layout.append(layer)
        return layout

    def sanitize(self, weights: dict) -> dict:
        """transformers' renames of the original names; per-expert ``w1/w3`` and ``w2`` stacked."""
        renamed = {}
        for name, tensor in weights.items():
            bare = name.removeprefix("model.")
            for pattern, target in RENAMES:
                bare = pattern.sub(target, bare)
            renamed[bare if bare.startswith("lm_head.") else f"model.{bare}"] = tensor
        experts = self.config.n_routed_experts
        for i in range(self.config.num_hidden_layers):
            prefix = f"model.layers.{i}.mlp.experts"
            if f"{prefix}.0.w1.weight" in renamed:
                up = ("w1.weight", "w3.weight")
                stack_expert_weights(renamed, prefix, experts, up, f"{prefix}.gate_up_proj")
                stack_expert_weights(
                    renamed, prefix, experts, ("w2.weight",), f"{prefix}.down_proj"
                )
        return super().sanitize(renamed)


MODEL_TYPES = {"deepseek_v4": DeepseekV4ForCausalLM}
