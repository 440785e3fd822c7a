"""Splitting a projection into attention heads and merging the heads back.

Every attention block wraps its kernel in this pair: ``[batch, seq, heads*dim]`` is
reshaped to ``[batch, seq, heads, dim]`` and transposed to ``[batch, heads, seq, dim]``,
and the kernel's output goes the other way. Both shapes are ``Constant`` nodes, as in
the copies these replace, so a block that switches to them keeps its graph.
"""

from __future__ import annotations

import onnx_ir as ir

_SWAP_SEQ_AND_HEADS = [0, 2, 1, 3]


def split_heads(op, x: ir.Value, num_heads: int = -1, head_dim: int = -1) -> ir.Value:
    """``[batch, seq, heads*dim]`` -> ``[batch, heads, seq, dim]``.

    Give ``num_heads``, ``head_dim`` or both; one left at ``-1`` is inferred.
    """
    if num_heads == -1 and head_dim == -1:
        raise ValueError("split_heads needs num_heads or head_dim")
    x = op.Reshape(x, op.Constant(value_ints=[0, 0, num_heads, head_dim]))
    return op.Transpose(x, perm=_SWAP_SEQ_AND_HEADS)


def merge_heads(op, x: ir.Value) -> ir.Value:
    """``[batch, heads, seq, dim]`` -> ``[batch, seq, heads*dim]``."""
    x = op.Transpose(x, perm=_SWAP_SEQ_AND_HEADS)
    return op.Reshape(x, op.Constant(value_ints=[0, 0, -1]))
