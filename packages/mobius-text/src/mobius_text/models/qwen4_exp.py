"""Qwen4-Exp text: Qwen3.5-MoE layers on gated residual streams, QSA attention and n-gram PLE.

What differs from Qwen3.5-MoE (``qwen3_5_moe_text``):

* Residual streams: the decoder carries ``hc_count`` copies of the hidden state,
  concatenated ``[batch, seq, n * hidden]``. Before each block (mixer, MLP) a
  :class:`GatedResidual` RMS-normalises each stream (``(1 + w)`` scale), mixes them into the
  block's input (``mean_i sigmoid(up(silu(down(x) / n)))_i * x_i``) and spreads the block's
  output back with per-stream weights ``2 * sigmoid(block_inject_weight(x) / n)``. There are
  no per-layer norms; the last mixer (``hyper_connection_mixer``) replaces the final norm.
* ``indexed_attention`` layers (``full_attention`` in checkpoints): the gated attention
  attends only to the tokens the QSA indexer keeps. Its raw keys (one head) are averaged
  over blocks of ``indexer_compress_ratio`` consecutive visible tokens, ``(1 + w)``-normed and
  rotated by the position of the block's first token; each query (normed, rotated) scores
  every complete block with ``sum_h relu(q_h · k) / sqrt(dim)`` and keeps its
  ``indexer_budget / compress_ratio`` best, plus the tokens of its incomplete last block.
  Per layer the cache adds ``index_key`` (raw keys) and ``index_rope`` (each token's
  ``[cos | sin]``, the per-token rotary history the block starts read).
* PLE layers (``ple_layer_ids``, one-indexed, linear layers only) add to the streams a
  gated hashed n-gram embedding (:class:`Qwen4ExpPLELayer`) with a dilated depthwise conv.
  Their cache adds ``ple_conv_state`` and ``ngram_context`` (the last ``ngram_size - 1``
  token ids XOR ``eos``, as base-256 digits so any float dtype holds them exactly; zeros,
  the empty state, read back as ``eos``).
* The Gated DeltaNet's output norm gates with ``output_gate_type`` (``silu`` or ``sigmoid``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    Linear,
    apply_rotary,
    lowest_value,
    make_rotary_embedding,
    rotary_dim,
)
from mobius_text.models._hyper_connections import inverse_rms
from mobius_text.models.gemma import GemmaRMSNorm
from mobius_text.models.mamba import (
    DepthwiseConv1d,
    HybridDecoderLayer,
    HybridModel,
    hybrid_masks,
)
from mobius_text.models.olmo_hybrid import GatedRMSNormAfter, OlmoHybridForCausalLM
from mobius_text.models.qwen2_moe import SharedExpertMoeBlock, make_experts
from mobius_text.models.qwen3_5 import Qwen3_5GatedDeltaNet, Qwen3_5MoeTextConfig
from mobius_text.models.qwen3_next import GatedOutputAttention, Qwen3NextForCausalLM
from mobius_text.models.text_of_vlm import TextConfigOf, TextOfVLM

FLOAT, INT64, BOOL = ir.DataType.FLOAT, ir.DataType.INT64, ir.DataType.BOOL
_QWEN4_FIELDS = (
    "hc_count",
    "hc_lowrank",
    "ple_conv_kernel_size",
    "ngram_size",
    "heads_per_ngram",
    "ngram_vocab_size_base",
    "make_ngram_vocab_size_divisible_by",
    "seed",
    "indexer_n_heads",
    "indexer_head_dim",
    "indexer_budget",
    "indexer_compress_ratio",
)


@dataclass
class Qwen4ExpTextConfig(Qwen3_5MoeTextConfig):
    """Qwen3.5-MoE's fields plus the residual streams', QSA's and PLE's."""

    hc_count: int = 4
    hc_lowrank: int = 320
    ple_layer_ids: list[int] = field(default_factory=list)
    ple_embed_dim: int = 0
    ple_conv_kernel_size: int = 4
    ngram_size: int = 3
    heads_per_ngram: int = 8
    ngram_vocab_size_base: int = 20_000_000
    make_ngram_vocab_size_divisible_by: int = 128
    seed: int = 1234
    indexer_n_heads: int = 1
    indexer_head_dim: int = 1
    indexer_budget: int = 1
    indexer_compress_ratio: int = 1
    output_gate_type: str = "silu"
    ple_eos_token_id: int = 0

    @classmethod
    def hf_fields(cls, hf_config):
        # Qwen3.5-MoE forces renormalised top-k weights; Qwen4-Exp's config says.
        fields = super().hf_fields(hf_config)
        fields["norm_topk_prob"] = bool(hf_config.norm_topk_prob)
        fields.update({name: getattr(hf_config, name) for name in _QWEN4_FIELDS})
        if hf_config.indexer_n_heads is None:  # transformers' attention layers need it too
            raise ValueError("Qwen4-Exp attention layers need the QSA indexer fields")
        eos = hf_config.eos_token_id
        fields.update(
            ple_layer_ids=sorted(set(hf_config.ple_layer_ids or [])),
            ple_embed_dim=hf_config.ple_embed_dim or hf_config.hidden_size,
            output_gate_type=hf_config.output_gate_type or hf_config.hidden_act,
            ple_eos_token_id=(eos[0] if isinstance(eos, list) else eos) or 0,
        )
        return fields

    def has_ple(self, layer_idx: int) -> bool:
        return layer_idx + 1 in self.ple_layer_ids


def grouped_rms_norm(op, x: ir.Value, weight: ir.Value, groups: int, eps: float) -> ir.Value:
    """RMS-normalise each of the ``groups`` slices of ``x [..., groups * g]``, then ``* (1 + weight)``.

    In float32, cast back, as the reference does.
    """
    x32 = op.Cast(x, to=FLOAT)
    split = op.Reshape(x32, op.Constant(value_ints=[0, 0, groups, -1]))  # [b, s, n, g]
    y = op.Reshape(op.Mul(split, inverse_rms(op, split, eps)), op.Constant(value_ints=[0, 0, -1]))
    return op.CastLike(op.Mul(y, op.Add(op.Cast(weight, to=FLOAT), 1.0)), x)


class GroupedRMSNorm(nn.Module):
    """``(1 + w)`` RMS norm over each ``group``-wide slice of the last axis (one per stream)."""

    def __init__(self, dim: int, group: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter([dim])
        self.groups, self.eps = dim // group, eps

    def forward(self, op, x):
        return grouped_rms_norm(op, x, self.weight, self.groups, self.eps)


class GatedResidual(nn.Module):
    """One block's stream mixer (see the module docstring).

    ``forward`` returns the block input ``[b, s, hidden]`` and, with ``block_inject_weight``,
    the per-stream output weights ``[b, s, n]``.
    """

    def __init__(self, config: Qwen4ExpTextConfig, use_combine: bool = True) -> None:
        super().__init__()
        n, hidden = config.hc_count, config.hidden_size
        self.hc_norm = GroupedRMSNorm(n * hidden, hidden, config.rms_norm_eps)
        self.input_mix_weight_down = Linear(n * hidden, config.hc_lowrank)
        self.input_mix_weight_up = Linear(config.hc_lowrank, n * hidden)
        self.block_inject_weight = Linear(n * hidden, n) if use_combine else None
        self.n = n

    def forward(self, op, streams):
        normed = self.hc_norm(op, streams)  # [b, s, n*hidden]
        down = op.Div(self.input_mix_weight_down(op, normed), float(self.n))
        mix = op.Sigmoid(self.input_mix_weight_up(op, op.Mul(down, op.Sigmoid(down))))
        mixed = op.Reshape(op.Mul(mix, normed), op.Constant(value_ints=[0, 0, self.n, -1]))
        mixed = op.ReduceMean(mixed, op.Constant(value_ints=[2]), keepdims=0)  # [b, s, hidden]
        if self.block_inject_weight is None:
            return mixed
        inject = op.Sigmoid(op.Div(self.block_inject_weight(op, normed), float(self.n)))
        return mixed, op.Mul(inject, 2.0)

    @staticmethod
    def inject(op, streams, block_out, weights):
        """``streams + weights[..., i] * block_out`` on every stream ``i``."""
        spread = op.Mul(op.Unsqueeze(block_out, [2]), op.Unsqueeze(weights, [-1]))
        return op.Add(streams, op.Reshape(spread, op.Constant(value_ints=[0, 0, -1])))


class ActivationGatedRMSNorm(GatedRMSNormAfter):
    """``rms_norm(x) * weight * act(gate)`` with ``act`` ``silu`` or ``sigmoid``."""

    def __init__(self, dim: int, eps: float, activation: str) -> None:
        super().__init__(dim, eps)
        if activation not in ("silu", "sigmoid"):
            raise ValueError(f"unsupported output gate activation {activation!r}")
        self.activation = activation

    def forward(self, op, x, gate):
        if self.activation == "silu":
            return super().forward(op, x, gate)
        y = op.RMSNormalization(x, self.weight, axis=-1, epsilon=self.eps, stash_type=1)
        return op.Mul(y, op.Sigmoid(gate))


class Qwen4ExpGatedDeltaNet(Qwen3_5GatedDeltaNet):
    """Qwen3.5's Gated DeltaNet with the configured output-gate activation."""

    def __init__(self, config: Qwen4ExpTextConfig) -> None:
        super().__init__(config)
        self.norm = ActivationGatedRMSNorm(self.dv, config.rms_norm_eps, config.output_gate_type)


def qsa_blocks(op, attention_mask, input_ids, ratio: int):
    """The indexer's block layout, shared by every indexed layer of a step.

    A token's block is its rank among the row's real tokens // ``ratio``. Returns float
    one-hots ``member`` and ``start`` ``[b, blocks, total]`` (the tokens of each block; its
    first token), ``complete_block [b, seq, blocks]`` and ``complete_token [b, seq, total]``
    (whether the block, the token's block, is complete for each query).
    """
    real = op.Cast(attention_mask, to=BOOL)  # [b, total]
    rank = op.Max(op.Sub(op.CumSum(attention_mask, op.Constant(value_int=1)), 1), 0)
    block = op.Div(rank, ratio)  # [b, total]
    total = op.Shape(attention_mask, start=1, end=2)
    blocks = op.Range(0, op.Squeeze(op.Add(op.Div(total, ratio), 1), [0]), 1)  # [nb]
    real_keys = op.Unsqueeze(real, [1])  # [b, 1, total]
    member = op.And(op.Equal(op.Unsqueeze(block, [1]), op.Unsqueeze(blocks, [0, 2])), real_keys)
    starts = op.Unsqueeze(op.Mul(blocks, ratio), [0, 2])
    start = op.And(op.Equal(op.Unsqueeze(rank, [1]), starts), real_keys)  # [b, nb, total]
    seq = op.Shape(input_ids, start=1, end=2)
    seen = op.Unsqueeze(op.Add(op.Slice(rank, op.Neg(seq), [2**62], [1]), 1), [-1])  # [b, s, 1]
    complete_block = op.LessOrEqual(op.Mul(op.Add(blocks, 1), ratio), seen)  # [b, s, nb]
    complete_token = op.LessOrEqual(op.Unsqueeze(op.Mul(op.Add(block, 1), ratio), [1]), seen)
    return (
        op.Cast(member, to=FLOAT),
        op.Cast(start, to=FLOAT),
        complete_block,
        complete_token,
    )


class Qwen4ExpQSAIndexer(nn.Module):
    """Keeps, per query, the tokens of its best complete blocks and of its incomplete one."""

    def __init__(self, config: Qwen4ExpTextConfig) -> None:
        super().__init__()
        self.heads, self.dim = config.indexer_n_heads, config.indexer_head_dim
        self.index_qk_proj = Linear(config.hidden_size, (self.heads + 1) * self.dim)
        self.q_layernorm = GemmaRMSNorm(self.dim, config.rms_norm_eps)
        self.k_layernorm = GemmaRMSNorm(self.dim, config.rms_norm_eps)
        self.rope_dim = rotary_dim(config.rope, config.head_dim)
        self.ratio = config.indexer_compress_ratio
        self.block_topk = config.indexer_budget // self.ratio

    def forward(self, op, x, position_embeddings, blocks, past_key, past_rope):
        cos, sin = position_embeddings  # [b, s, rope/2]
        member, start, complete_block, complete_token = blocks
        q, k = op.Split(
            self.index_qk_proj(op, x), [self.heads * self.dim, self.dim], axis=-1, _outputs=2
        )
        q = self.q_layernorm(op, op.Reshape(q, op.Constant(value_ints=[0, 0, self.heads, -1])))
        q = apply_rotary(op, op.Transpose(q, perm=[0, 2, 1, 3]), cos, sin, self.rope_dim)
        key = op.Concat(past_key, op.Unsqueeze(k, [1]), axis=2)  # [b, 1, total, D]
        rope = op.CastLike(op.Concat(cos, sin, axis=-1), x)
        rope = op.Concat(past_rope, op.Unsqueeze(rope, [1]), axis=2)  # [b, 1, total, rope]

        # Block keys: the mean of each block's raw keys, normed, rotated by its first token.
        pooled = op.MatMul(member, op.Cast(op.Squeeze(key, [1]), to=FLOAT))  # [b, nb, D]
        pooled = self.k_layernorm(op, op.CastLike(op.Div(pooled, float(self.ratio)), x))
        block_rope = op.MatMul(start, op.Cast(op.Squeeze(rope, [1]), to=FLOAT))  # [b, nb, rope]
        block_cos, block_sin = op.Split(block_rope, num_outputs=2, axis=-1, _outputs=2)
        block_key = apply_rotary(op, op.Unsqueeze(pooled, [1]), block_cos, block_sin, self.rope_dim)

        scores = op.MatMul(
            op.Cast(q, to=FLOAT), op.Transpose(op.Cast(block_key, to=FLOAT), perm=[0, 1, 3, 2])
        )  # [b, H, s, nb]
        scores = op.ReduceSum(op.Relu(scores), op.Constant(value_ints=[1]), keepdims=0)
        scores = op.Div(scores, math.sqrt(self.dim))  # [b, s, nb]
        lowest = op.Constant(value_float=lowest_value(FLOAT))
        scores = op.Where(complete_block, scores, lowest)
        k_top = op.Min(op.Constant(value_ints=[self.block_topk]), op.Shape(scores, start=2))
        _, chosen = op.TopK(scores, k_top, axis=-1, _outputs=2)
        picked = op.ScatterElements(
            op.Mul(op.Cast(complete_block, to=FLOAT), 0.0),
            chosen,
            op.Expand(op.Constant(value_float=1.0), op.Shape(chosen)),
            axis=-1,
        )
        picked = op.Mul(picked, op.Cast(complete_block, to=FLOAT))  # [b, s, nb]
        kept = op.Greater(op.MatMul(picked, member), 0.5)  # [b, s, total]
        keep = op.Or(kept, op.Not(complete_token))
        return op.Unsqueeze(keep, [1]), key, rope


class Qwen4ExpAttention(GatedOutputAttention):
    """Qwen3.5's gated attention over the tokens its QSA indexer keeps."""

    def __init__(self, config: Qwen4ExpTextConfig) -> None:
        super().__init__(config)
        self.indexer = Qwen4ExpQSAIndexer(config)

    def forward(self, op, x, position_embeddings, bias, blocks, past_key, past_value, *past):
        keep, index_key, index_rope = self.indexer(op, x, position_embeddings, blocks, *past)
        lowest = op.Constant(
            value=ir.tensor(np.array(lowest_value(bias.dtype), bias.dtype.numpy()))
        )
        bias = op.Where(keep, bias, lowest)
        y, (key, value) = super().forward(op, x, position_embeddings, bias, past_key, past_value)
        return y, (key, value, index_key, index_rope)


def _splitmix64(value: int) -> int:
    mask = (1 << 64) - 1
    value = (value + 0x9E3779B97F4A7C15) & mask
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & mask
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & mask
    return value ^ (value >> 31)


def ngram_multipliers(vocab_size: int, ngram_size: int, ple_index: int, seed: int) -> list[int]:
    """The odd hash multiplier of each n-gram position (small enough that ``id * m`` fits int64)."""
    half_bound = max(1, ((1 << 63) - 1) // max(vocab_size, 1) // 2)
    base = seed + 10007 * ple_index
    return [
        2 * (_splitmix64((base + 0x9E3779B97F4A7C15 * (i + 1)) & ((1 << 64) - 1)) % half_bound) + 1
        for i in range(ngram_size)
    ]


def _primes_from(start: int, count: int) -> list[int]:
    """The ``count`` first primes ``>= start``."""
    primes, value = [], max(start, 2)
    while len(primes) < count:
        if all(value % d for d in range(2, math.isqrt(value) + 1)):
            primes.append(value)
        value += 1
    return primes


class NGramEmbedding(nn.Module):
    """The hashed n-gram embedding of one PLE layer: ``ngram_embedding [padded, dim / heads]``.

    Head ``h`` of n-gram order ``k`` (``heads_per_ngram`` per order, ``k = 2..ngram_size``)
    reads row ``offset_h + (xor_j tok[-j] * m_j, j < k) mod size_h``; a token before the
    context or behind an ``eos`` reads as ``eos``. Sizes are consecutive primes from
    ``ngram_vocab_size_base``, numbered over all PLE layers.
    """

    def __init__(self, config: Qwen4ExpTextConfig, ple_index: int) -> None:
        super().__init__()
        self.n, self.per_order = config.ngram_size, config.heads_per_ngram
        heads = (self.n - 1) * self.per_order
        primes = _primes_from(config.ngram_vocab_size_base, (ple_index + 1) * heads)
        self.sizes = primes[ple_index * heads :]
        self.offsets = [int(o) for o in np.cumsum([0, *self.sizes[:-1]])]
        divisor = config.make_ngram_vocab_size_divisible_by
        padded = -(-sum(self.sizes) // divisor) * divisor
        self.ngram_embedding = Embedding(padded, config.ple_embed_dim // heads)
        self.multipliers = ngram_multipliers(config.vocab_size, self.n, ple_index, config.seed)
        self.eos = config.ple_eos_token_id

    def forward(self, op, history: ir.Value) -> ir.Value:
        """``history [b, n - 1 + s]`` (context then this step's ids) → ``[b, s, ple_embed_dim]``."""
        context = self.n - 1
        eos = op.Constant(value_int=self.eos)
        shifted, valid = [], None
        for shift in range(self.n):
            tokens = op.Slice(history, [context - shift], [-shift if shift else 2**62], [1])
            if shift:
                not_eos = op.Not(op.Equal(tokens, eos))
                valid = not_eos if valid is None else op.And(valid, not_eos)
                tokens = op.Where(valid, tokens, eos)
            shifted.append(op.Mul(tokens, op.Constant(value_int=self.multipliers[shift])))
        ids = []
        for order in range(2, self.n + 1):
            mixed = shifted[0]
            for position in range(1, order):
                mixed = op.BitwiseXor(mixed, shifted[position])
            heads = slice((order - 2) * self.per_order, (order - 1) * self.per_order)
            sizes = op.Constant(value_ints=self.sizes[heads])
            ids.append(
                op.Add(
                    op.Mod(op.Unsqueeze(mixed, [-1]), sizes),
                    op.Constant(value_ints=self.offsets[heads]),
                )
            )
        rows = self.ngram_embedding(op, op.Concat(*ids, axis=-1))  # [b, s, heads, dim / heads]
        return op.Reshape(rows, op.Constant(value_ints=[0, 0, -1]))


def encode_ids(op, ids: ir.Value, eos: int, like: ir.Value) -> ir.Value:
    """``[b, L]`` ids → ``[b, L, 3]`` base-256 digits of ``id xor eos`` in ``like``'s dtype."""
    value = op.BitwiseXor(ids, op.Constant(value_int=eos))
    digits = [
        op.Mod(op.Div(value, op.Constant(value_int=256**i)), op.Constant(value_int=256))
        for i in range(3)
    ]
    return op.CastLike(op.Concat(*[op.Unsqueeze(d, [-1]) for d in digits], axis=-1), like)


def decode_ids(op, digits: ir.Value, eos: int) -> ir.Value:
    """The inverse of :func:`encode_ids`."""
    weights = op.Constant(value=ir.tensor(np.array([1.0, 256.0, 65536.0], np.float32)))
    value = op.ReduceSum(
        op.Mul(op.Cast(digits, to=FLOAT), weights), op.Constant(value_ints=[-1]), keepdims=0
    )
    return op.BitwiseXor(op.Cast(op.Round(value), to=INT64), op.Constant(value_int=eos))


class DilatedDepthwiseConv1d(DepthwiseConv1d):
    """A bias-free depthwise ``Conv1d`` whose taps are ``dilation`` steps apart."""

    def __init__(self, channels: int, kernel: int, dilation: int) -> None:
        super().__init__(channels, kernel, bias=False)
        self.dilation = dilation

    def forward(self, op, x):
        return op.Conv(x, self.weight, group=self.channels, dilations=[self.dilation])


class Qwen4ExpPLELayer(nn.Module):
    """Per-Layer Embedding: a hashed n-gram value gated by each stream, plus a dilated conv.

    ``gate_i = signed_sqrt(norm_key(key_proj(e))_i · norm_query(x)_i / sqrt(hidden))``,
    ``g_i = sigmoid(gate_i) * value_proj(e)``; the output ``g + silu(conv(norm_conv(g)))``,
    the depthwise conv of ``ple_conv_kernel_size`` taps ``ngram_size`` apart, over time.
    """

    def __init__(self, config: Qwen4ExpTextConfig, ple_index: int) -> None:
        super().__init__()
        hidden, n = config.hidden_size, config.hc_count
        width, eps = n * hidden, config.rms_norm_eps
        self.ple_embedding = NGramEmbedding(config, ple_index)
        self.key_proj = Linear(config.ple_embed_dim, width)
        self.value_proj = Linear(config.ple_embed_dim, hidden)
        self.norm_key = GroupedRMSNorm(width, hidden, eps)
        self.norm_query = GroupedRMSNorm(width, hidden, eps)
        self.norm_conv = GroupedRMSNorm(width, hidden, eps)
        self.conv1d = DilatedDepthwiseConv1d(width, config.ple_conv_kernel_size, config.ngram_size)
        self.state_len = (config.ple_conv_kernel_size - 1) * config.ngram_size
        self.hidden, self.n = hidden, n

    def forward(self, op, x, ids, real, conv_state, ngram_context):
        eos = self.ple_embedding.eos
        context = decode_ids(op, ngram_context, eos)  # [b, n - 1]
        history = op.Concat(context, ids, axis=1)
        new_context = encode_ids(
            op, op.Slice(history, [-(self.ple_embedding.n - 1)], [2**62], [1]), eos, ngram_context
        )
        embeddings = op.CastLike(self.ple_embedding(op, history), x)
        split = op.Constant(value_ints=[0, 0, self.n, self.hidden])
        key = op.Reshape(self.norm_key(op, self.key_proj(op, embeddings)), split)
        query = op.Reshape(self.norm_query(op, x), split)
        value = self.value_proj(op, embeddings)  # [b, s, hidden]
        gate = op.ReduceSum(op.Mul(key, query), op.Constant(value_ints=[-1]), keepdims=1)
        gate = op.Div(gate, math.sqrt(self.hidden))  # [b, s, n, 1]
        gate = op.Mul(op.Sqrt(op.Max(op.Abs(gate), 1e-6)), op.Sign(gate))
        gated = op.Mul(op.Sigmoid(gate), op.Unsqueeze(value, [2]))
        gated = op.Reshape(gated, op.Constant(value_ints=[0, 0, -1]))  # [b, s, n*hidden]
        normed = op.Mul(self.norm_conv(op, gated), real)
        gated = op.Mul(gated, real)
        window = op.Concat(conv_state, op.Transpose(normed, perm=[0, 2, 1]), axis=2)
        new_state = op.Slice(window, [-self.state_len], [2**62], [2])
        conv = self.conv1d(op, window)
        conv = op.Transpose(op.Mul(conv, op.Sigmoid(conv)), perm=[0, 2, 1])
        return op.Add(gated, conv), (new_state, new_context)


class Qwen4ExpDecoderLayer(HybridDecoderLayer):
    """PLE (where configured), then mixer and MoE, each between a :class:`GatedResidual`."""

    def __init__(self, config: Qwen4ExpTextConfig, layer_idx: int) -> None:
        super().__init__(attends=config.layer_kinds[layer_idx] != "linear_attention")
        if self.attends:
            self.self_attn = Qwen4ExpAttention(config)
        else:
            self.linear_attn = Qwen4ExpGatedDeltaNet(config)
        self.mlp = SharedExpertMoeBlock(
            *make_experts(config),
            config.hidden_size,
            config.shared_expert_intermediate_size,
            config.hidden_act,
        )
        ple_index = config.ple_layer_ids.index(layer_idx + 1) if config.has_ple(layer_idx) else -1
        self.ple = Qwen4ExpPLELayer(config, ple_index) if ple_index >= 0 else None
        self.attn_hyper_connection = GatedResidual(config)
        self.mlp_hyper_connection = GatedResidual(config)

    def forward(self, op, x, rope, bias, real, ids, blocks, past):
        present_ple = ()
        if self.ple is not None:
            *past, conv_state, context = past
            h, present_ple = self.ple(op, x, ids, real, conv_state, context)
            x = op.Add(x, h)
        h, weights = self.attn_hyper_connection(op, x)
        if self.attends:
            h, present = self.self_attn(op, h, rope, bias, blocks, *past)
        else:
            h, present = self.linear_attn(op, h, real, *past)
        x = GatedResidual.inject(op, x, h, weights)
        h, weights = self.mlp_hyper_connection(op, x)
        x = GatedResidual.inject(op, x, self.mlp(op, h), weights)
        return x, (*present, *present_ple)


class Qwen4ExpTextModel(HybridModel):
    """Embeddings copied onto ``hc_count`` streams, the layers, the final stream mixer."""

    def __init__(self, config: Qwen4ExpTextConfig) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [Qwen4ExpDecoderLayer(config, i) for i in range(len(config.layer_kinds))]
        )
        self.hyper_connection_mixer = GatedResidual(config, use_combine=False)
        self.rotary_emb = make_rotary_embedding(
            config.rope, config.head_dim, config.max_position_embeddings
        )
        self.n, self.ratio = config.hc_count, config.indexer_compress_ratio
        self.eos = config.ple_eos_token_id

    def forward(self, op, input_ids, attention_mask, position_ids, past):
        x = self.embed_tokens(op, input_ids)  # [b, s, hidden]
        rope = self.rotary_emb(op, position_ids)
        bias, real = hybrid_masks(op, input_ids, attention_mask, x)
        blocks = qsa_blocks(op, attention_mask, input_ids, self.ratio)
        real_ids = op.Cast(op.Squeeze(real, [-1]), to=BOOL)
        ple_ids = op.Where(real_ids, input_ids, op.Constant(value_int=self.eos))  # pads read eos
        streams = op.Concat(*[x] * self.n, axis=-1)  # [b, s, n*hidden]
        presents = []
        for layer, layer_past in zip(self.layers, past, strict=True):
            streams, present = layer(op, streams, rope, bias, real, ple_ids, blocks, layer_past)
            presents.append(present)
        return self.hyper_connection_mixer(op, streams), presents


class Qwen4ExpForCausalLM(Qwen3NextForCausalLM):
    """Qwen4-Exp text causal LM (HF ``Qwen4ExpForCausalLM``)."""

    config_class = Qwen4ExpTextConfig
    model_class = Qwen4ExpTextModel

    def cache_layout(self):
        c = self.config
        layout = [list(layer) for layer in OlmoHybridForCausalLM.cache_layout(self)]
        rope = rotary_dim(c.rope, c.head_dim)
        for i, kind in enumerate(c.layer_kinds):
            if kind != "linear_attention":
                layout[i] += [
                    ("index_key", ["batch", 1, "past_sequence", c.indexer_head_dim]),
                    ("index_rope", ["batch", 1, "past_sequence", rope]),
                ]
            elif c.has_ple(i):
                state = (c.ple_conv_kernel_size - 1) * c.ngram_size
                layout[i] += [
                    ("ple_conv_state", ["batch", c.hc_count * c.hidden_size, state]),
                    ("ngram_context", ["batch", c.ngram_size - 1, 3]),
                ]
        return layout

    def sanitize(self, weights: dict) -> dict:
        """Concatenate each n-gram table's ``shard_*`` rows, as transformers does on load, and
        check the hash buffers against the ones this graph bakes in (then drop them)."""
        from mobius.weights import DerivedTensor

        for i, layer in enumerate(self.model.layers):
            if layer.ple is None:
                continue
            prefix = f"model.layers.{i}.ple.ple_embedding."
            table = layer.ple.ple_embedding
            expected = {
                "layer_multipliers": table.multipliers,
                "ngram_heads_vocab_sizes": table.sizes,
                "ngram_heads_offsets": table.offsets,
            }
            for name, values in expected.items():
                stored = weights.pop(prefix + name, None)
                if stored is not None and stored.numpy().tolist() != list(values):
                    raise ValueError(f"{prefix}{name} is not the hash this config derives")
            shard_names = [k for k in weights if k.startswith(prefix + "ngram_embedding.shard_")]
            if not shard_names:
                continue
            shard_names.sort(key=lambda k: int(k.split(".shard_")[1].split(".")[0]))
            parts = [weights.pop(k) for k in shard_names]

            def joined(parts=parts):
                return np.concatenate([t.numpy() for t in parts], axis=0)

            rows = sum(t.shape[0] for t in parts)
            weights[prefix + "ngram_embedding.weight"] = DerivedTensor(
                joined, (rows, *parts[0].shape[1:]), parts[0].dtype
            )
        return super().sanitize(weights)


# -- the decoder of a Qwen4ExpForConditionalGeneration checkpoint (see text_of_vlm.py) ----------


@dataclass
class Qwen4ExpVLMTextConfig(TextConfigOf, Qwen4ExpTextConfig):
    pass


class Qwen4ExpTextOnlyForCausalLM(TextOfVLM, Qwen4ExpForCausalLM):
    """``Qwen4ExpForCausalLM`` of a ``Qwen4ExpForConditionalGeneration`` checkpoint: the decoder
    under ``model.language_model``; the vision tower and the multi-token-prediction head
    (which generation does not read) are not."""

    config_class = Qwen4ExpVLMTextConfig
    renames = (("model.language_model.", "model."),)
    ignored = ("model.visual.*", "mtp.*")


MODEL_TYPES = {
    "qwen4_exp_text": Qwen4ExpForCausalLM,
    "Qwen4ExpForCausalLM": Qwen4ExpTextOnlyForCausalLM,
}
