"""Attention with a KV cache, and the additive masks it consumes."""

from __future__ import annotations

import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy.finfo)
import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components._linear import Linear
from mobius.components._rope import apply_rotary

_NUMPY_FLOAT = {
    ir.DataType.FLOAT: np.float32,
    ir.DataType.FLOAT16: np.float16,
    ir.DataType.BFLOAT16: ml_dtypes.bfloat16,
    ir.DataType.DOUBLE: np.float64,
}


def repeat_kv(op, x: ir.Value, num_heads: int, num_kv_heads: int, head_dim: int) -> ir.Value:
    """``[batch, kv_heads, seq, dim]`` → ``[batch, heads, seq, dim]``: head ``h`` reads kv head ``h // group``.

    For attention written out with MatMul/Softmax (sinks, custom masks); the ONNX
    ``Attention`` op groups heads itself.
    """
    if num_heads == num_kv_heads:
        return x
    group = num_heads // num_kv_heads
    x = op.Expand(op.Unsqueeze(x, [2]), op.Constant(value_ints=[1, 1, group, 1, 1]))
    return op.Reshape(x, op.Constant(value_ints=[0, num_heads, -1, head_dim]))


def lowest_value(dtype: ir.DataType) -> float:
    """The most negative finite value of a float dtype: masked scores stay finite (no NaN rows)."""
    return float(ml_dtypes.finfo(_NUMPY_FLOAT[dtype]).min)


def attention_bias(
    op,
    attention_mask: ir.Value,
    query_length: ir.Value,
    dtype: ir.DataType,
    sliding_window: int | None = None,
) -> ir.Value:
    """Additive mask ``[batch, 1, seq, total]``: causal, padding, and an optional sliding window.

    ``attention_mask [batch, total]`` marks real tokens with 1; the queries are the
    last ``query_length`` positions of the ``total`` (past + new) sequence.
    A key is visible when it is real, not after the query, and (with a window)
    fewer than ``sliding_window`` positions before it.
    """
    total = op.Squeeze(op.Slice(op.Shape(attention_mask), [1], [2]), [0])
    key_pos = op.Range(0, total, 1)  # [total]
    query_pos = op.Unsqueeze(op.Range(op.Sub(total, query_length), total, 1), [1])  # [seq, 1]
    visible = op.LessOrEqual(key_pos, query_pos)  # [seq, total]
    if sliding_window is not None:
        in_window = op.Less(op.Sub(query_pos, key_pos), sliding_window)
        visible = op.And(visible, in_window)
    real_keys = op.Unsqueeze(
        op.Cast(attention_mask, to=ir.DataType.BOOL), [1, 2]
    )  # [batch,1,1,total]
    visible = op.And(real_keys, visible)  # [batch, 1, seq, total]
    zero = op.Constant(value=ir.tensor(np.array(0, dtype=_NUMPY_FLOAT[dtype])))
    lowest = op.Constant(value=ir.tensor(np.array(lowest_value(dtype), dtype=_NUMPY_FLOAT[dtype])))
    return op.Where(visible, zero, lowest)


class Attention(nn.Module):
    """Multi-head attention with grouped KV heads (MHA, GQA, MQA) and a KV cache.

    Input ``x [batch, seq, hidden]``; the cache tensors are ``[batch, kv_heads, past, head_dim]``.
    Returns the output and the present ``(key, value)``.
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        bias: bool = False,
        out_bias: bool = False,
        rotary_dim: int | None = None,
        scale: float | None = None,
    ) -> None:
        super().__init__()
        self.q_proj = Linear(hidden_size, num_heads * head_dim, bias)
        self.k_proj = Linear(hidden_size, num_kv_heads * head_dim, bias)
        self.v_proj = Linear(hidden_size, num_kv_heads * head_dim, bias)
        self.o_proj = Linear(num_heads * head_dim, hidden_size, out_bias)
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.rotary_dim = head_dim if rotary_dim is None else rotary_dim
        self.scale = head_dim**-0.5 if scale is None else scale

    def split_heads(self, op, x: ir.Value) -> ir.Value:
        """``[batch, seq, heads*head_dim]`` → ``[batch, heads, seq, head_dim]``."""
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, -1, self.head_dim]))
        return op.Transpose(x, perm=[0, 2, 1, 3])

    def project_qkv(self, op, x: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
        """Query, key and value, each ``[batch, heads, seq, head_dim]``; variants add norms here."""
        q = self.split_heads(op, self.q_proj(op, x))
        k = self.split_heads(op, self.k_proj(op, x))
        v = self.split_heads(op, self.v_proj(op, x))
        return q, k, v

    # Pairs of adjacent channels rotate together (GPT-J layout) instead of the two halves.
    interleaved_rotary = False

    def rotate(self, op, q, k, position_embeddings):
        """Apply the rotary embedding to queries and keys; ``None`` is a layer without one (NoPE)."""
        if position_embeddings is None:
            return q, k
        cos, sin = position_embeddings
        interleaved = self.interleaved_rotary
        return (
            apply_rotary(op, q, cos, sin, self.rotary_dim, interleaved),
            apply_rotary(op, k, cos, sin, self.rotary_dim, interleaved),
        )

    def attend(self, op, q, k, v, bias, past_key, past_value):
        """Scaled dot-product attention over the cache; variants add soft-capping, sinks..."""
        return op.Attention(q, k, v, bias, past_key, past_value, scale=self.scale, _outputs=3)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        q, k, v = self.project_qkv(op, x)
        q, k = self.rotate(op, q, k, position_embeddings)
        y, present_key, present_value = self.attend(op, q, k, v, bias, past_key, past_value)
        # y: [batch, heads, seq, head_dim] -> [batch, seq, heads*head_dim]
        y = op.Reshape(op.Transpose(y, perm=[0, 2, 1, 3]), op.Constant(value_ints=[0, 0, -1]))
        return self.o_proj(op, y), (present_key, present_value)
