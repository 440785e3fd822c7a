"""ALiBi: attention with linear biases (Bloom, Falcon-RW, MPT).

Each head adds ``slope * key_position`` to its attention scores. ALiBi is defined
on the distance ``key - query``, but softmax is unchanged by a constant added to
a whole row, so (as transformers does) only the key position is needed; the
bias is then ``[batch, heads, 1, total]``, broadcast over the queries and added
to the causal/padding mask into ``[batch, heads, seq, total]``.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from mobius.components import attention_bias


def alibi_slopes(num_heads: int) -> np.ndarray:
    """Per-head slopes ``[heads]`` float32, as Bloom and Falcon compute them.

    For ``2**k`` heads the slopes are the geometric sequence ``2**(-8/n * i)``,
    ``i = 1..n``. Otherwise the first ``2**k`` (largest power of two) heads take
    that sequence and the rest take every other slope (odd powers) of the
    sequence for ``2**(k+1)`` heads.
    """
    closest = 2 ** math.floor(math.log2(num_heads))
    base = np.float32(2 ** (-(2 ** -(math.log2(closest) - 3))))
    slopes = [base ** np.float32(p) for p in range(1, closest + 1)]
    if closest != num_heads:
        extra_base = np.float32(2 ** (-(2 ** -(math.log2(2 * closest) - 3))))
        remaining = min(closest, num_heads - closest)
        slopes += [extra_base ** np.float32(p) for p in range(1, 1 + 2 * remaining, 2)]
    return np.asarray(slopes, dtype=np.float32)


def cumulative_positions(op, attention_mask: ir.Value) -> ir.Value:
    """Key positions ``[batch, total]`` int64 that count real tokens only (0 at padding).

    Bloom and Falcon's ``(cumsum(mask) - 1) * mask``: with left padding, the first
    real token of every row is position 0.
    """
    counted = op.Sub(op.CumSum(attention_mask, op.Constant(value_int=1)), 1)
    return op.Mul(counted, attention_mask)


def alibi(op, slopes: np.ndarray, key_positions: ir.Value) -> ir.Value:
    """``slopes[h] * key_positions`` as float32 ``[batch, heads, 1, total]``."""
    positions = op.Unsqueeze(op.Cast(key_positions, to=ir.DataType.FLOAT), [1, 2])
    per_head = op.Constant(value=ir.tensor(np.asarray(slopes, np.float32).reshape(-1, 1, 1)))
    return op.Mul(positions, per_head)  # [batch,1,1,total] * [heads,1,1]


def alibi_attention_bias(
    op,
    attention_mask: ir.Value,
    query_length: ir.Value,
    dtype: ir.DataType,
    linear_bias: ir.Value,
) -> ir.Value:
    """The causal/padding mask plus a float32 ALiBi term: ``[batch, heads, seq, total]``.

    Masked entries hold the dtype's lowest value; the ALiBi term is non-negative,
    so adding it leaves them finite and still masked.
    """
    mask = attention_bias(op, attention_mask, query_length, dtype)  # [batch, 1, seq, total]
    return op.Add(mask, op.Cast(linear_bias, to=dtype))
