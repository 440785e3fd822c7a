"""Pieces of bidirectional (encoder) models: the padding mask, attention without a cache, pooling."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from mobius.components._attention import _NUMPY_FLOAT, lowest_value
from mobius.components._runtime import MS_DOMAIN, fused_ops, typed_like


def padding_bias(
    op, attention_mask: ir.Value, dtype: ir.DataType, queries: ir.Value | None = None
) -> ir.Value:
    """Additive mask ``[batch, 1, queries, keys]``: 0 for real keys (mask 1), the lowest value for pads.

    ``attention_mask [batch, keys]``; ``queries`` is a tensor ``[batch, queries, ...]``
    whose second axis counts the queries (default: the mask itself, for
    self-attention). ONNX Runtime wants the query axis spelled out, not broadcast.
    """
    real = op.Unsqueeze(op.Cast(attention_mask, to=ir.DataType.BOOL), [1, 2])  # [b, 1, 1, k]
    zero = op.Constant(value=ir.tensor(np.array(0, dtype=_NUMPY_FLOAT[dtype])))
    lowest = op.Constant(value=ir.tensor(np.array(lowest_value(dtype), dtype=_NUMPY_FLOAT[dtype])))
    rows = op.Shape(attention_mask if queries is None else queries, start=1, end=2)
    shape = op.Concat([1, 1], rows, [1], axis=0)  # [1, 1, queries, 1]
    return op.Expand(op.Where(real, zero, lowest), shape)


def bidirectional_attention(
    op, q: ir.Value, k: ir.Value, v: ir.Value, bias: ir.Value, num_heads: int, scale: float
) -> ir.Value:
    """Every token attends to every real token: ``q``, ``k``, ``v`` and the result ``[batch, seq, heads*dim]``.

    The ONNX ``Attention`` op splits the heads itself (3-D inputs), so no transposes
    are needed; ``bias`` is :func:`padding_bias` or anything broadcastable to
    ``[batch, heads, seq, seq]``. Unmasked ``cpu`` and ``cuda`` graphs use ONNX Runtime's
    ``MultiHeadAttention``, the faster CPU kernel on long sequences (one call, 2 threads,
    best of 5: 1500 tokens x 6 heads of 64, 33 against 35 ms; 4096 x 8 of 40, 154 against
    219 ms; 4352 x 24 of 128, 0.99 against 1.39 s). Masked ones keep the ONNX op, the
    faster one with a padding bias at 128 tokens (0.47 against 0.59 ms).
    """
    if bias is None and fused_ops(op):
        y = op.MultiHeadAttention(q, k, v, num_heads=num_heads, scale=scale, _domain=MS_DOMAIN)
        return typed_like(y, q)
    return op.Attention(q, k, v, bias, q_num_heads=num_heads, kv_num_heads=num_heads, scale=scale)


def pool_tokens(
    op, hidden: ir.Value, attention_mask: ir.Value, mode: str, normalize: bool
) -> ir.Value:
    """A sentence embedding ``[batch, hidden]`` from token states ``[batch, seq, hidden]``.

    ``mode`` is ``"mean"`` (over real tokens, as sentence-transformers: the token
    count clamped at 1e-9), ``"cls"`` (the first token), ``"max"`` (over real
    tokens, pads set to -1e9 first) or ``"lasttoken"`` (the last real token, whichever
    side the pads are on: a decoder embedder's). ``normalize`` divides by the L2 norm, clamped at
    1e-12 as ``torch.nn.functional.normalize`` does.
    """
    mask = op.Unsqueeze(op.CastLike(attention_mask, hidden), [2])  # [batch, seq, 1]
    if mode == "mean":
        summed = op.ReduceSum(op.Mul(hidden, mask), [1], keepdims=0)
        count = op.ReduceSum(mask, [1], keepdims=0)
        tiny = op.CastLike(op.Constant(value=ir.tensor(np.array(1e-9, np.float32))), hidden)
        pooled = op.Div(summed, op.Max(count, tiny))
    elif mode == "cls":
        pooled = op.Gather(hidden, op.Constant(value=ir.tensor(np.array(0, np.int64))), axis=1)
    elif mode == "max":
        low = op.CastLike(op.Constant(value=ir.tensor(np.array(-1e9, np.float32))), hidden)
        masked = op.Where(op.Cast(mask, to=ir.DataType.BOOL), hidden, low)
        pooled = op.ReduceMax(masked, [1], keepdims=0)
    elif mode == "lasttoken":
        pooled = last_real_token(op, hidden, attention_mask)
    else:
        raise ValueError(f"unknown pooling {mode!r}; choose mean, cls, max or lasttoken")
    if not normalize:
        return pooled
    norm = op.ReduceL2(pooled, [1], keepdims=1)
    eps = op.CastLike(op.Constant(value=ir.tensor(np.array(1e-12, np.float32))), pooled)
    return op.Div(pooled, op.Max(norm, eps))


def last_real_token(op, hidden: ir.Value, attention_mask: ir.Value) -> ir.Value:
    """``hidden [batch, seq, dim]`` at each row's last real token: ``[batch, dim]``.

    The largest position the mask keeps, so left and right padding both give it.
    """
    seq = op.Squeeze(op.Shape(attention_mask, start=1, end=2), [0])
    positions = op.Range(op.Constant(value_int=0), seq, op.Constant(value_int=1))
    last = op.ArgMax(op.Mul(attention_mask, positions), axis=1, keepdims=1)  # [batch, 1]
    dims = op.Concat(op.Shape(hidden, start=0, end=1), [1], op.Shape(hidden, start=2), axis=0)
    index = op.Expand(op.Unsqueeze(last, [2]), dims)  # [batch, 1, dim]
    return op.Squeeze(op.GatherElements(hidden, index, axis=1), [1])


def causal_bias(op, queries: ir.Value, past: ir.Value, dtype: ir.DataType) -> ir.Value:
    """Additive causal mask ``[batch, 1, queries, past + queries]`` for a decoder with no padding.

    ``queries`` is ``[batch, queries, ...]`` and ``past`` a cache ``[batch, heads,
    past, dim]``: query ``i`` sits at position ``past + i`` and sees keys up to it.
    """
    seq = op.Squeeze(op.Shape(queries, start=1, end=2), [0])
    past_len = op.Squeeze(op.Shape(past, start=2, end=3), [0])
    total = op.Add(past_len, seq)
    key_pos = op.Range(0, total, 1)  # [total]
    query_pos = op.Unsqueeze(op.Range(past_len, total, 1), [1])  # [seq, 1]
    zero = op.Constant(value=ir.tensor(np.array(0, dtype=_NUMPY_FLOAT[dtype])))
    lowest = op.Constant(value=ir.tensor(np.array(lowest_value(dtype), dtype=_NUMPY_FLOAT[dtype])))
    mask = op.Unsqueeze(op.Where(op.LessOrEqual(key_pos, query_pos), zero, lowest), [0, 1])
    # The batch spelled out: GroupQueryAttention's slot counts take it from the mask.
    batch = op.Shape(queries, start=0, end=1)
    return op.Expand(mask, op.Concat(batch, op.Constant(value_ints=[1, 1, 1]), axis=0))
