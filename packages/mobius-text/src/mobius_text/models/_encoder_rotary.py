"""Rotary positions for encoders: every row counts 0, 1, 2... (padding sits at the end).

The encoder attention keeps q/k/v as ``[batch, seq, heads*dim]`` (the ONNX
``Attention`` op splits the heads), so the rotation runs on that 3-D layout too:
the ONNX ``RotaryEmbedding`` op with ``num_heads`` does it without a transpose.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import lowest_value, make_rotary_embedding
from mobius.config import RopeConfig


def sequence_positions(op, input_ids: ir.Value) -> ir.Value:
    """``[batch, seq]`` int64: 0..seq-1 on every row."""
    seq_len = op.Squeeze(op.Shape(input_ids, start=1, end=2), [0])
    positions = op.Unsqueeze(op.Range(0, seq_len, 1), [0])  # [1, seq]
    return op.Expand(positions, op.Shape(input_ids))


class EncoderRotary(nn.Module):
    """cos/sin ``[batch, seq, rotary_dim/2]`` of a rope config, for :func:`sequence_positions`."""

    def __init__(self, rope: RopeConfig, head_dim: int, max_positions: int) -> None:
        super().__init__()
        self.rotary = make_rotary_embedding(rope, head_dim, max_positions)
        self.rotary_dim = len(self.rotary.inv_freq) * 2

    def forward(self, op, position_ids: ir.Value) -> tuple[ir.Value, ir.Value, int]:
        """``(cos, sin, rotary_dim)``: what :func:`rotate_heads` takes."""
        cos, sin = self.rotary(op, position_ids)
        return cos, sin, self.rotary_dim


def rotate_heads(op, x: ir.Value, rotary: tuple, num_heads: int, interleaved: bool = False):
    """Rotate the first ``rotary_dim`` channels of each head of ``x [batch, seq, heads*dim]``.

    ``rotary`` is ``(cos, sin, rotary_dim)``, as :meth:`EncoderRotary.forward` returns it.
    """
    cos, sin, rotary_dim = rotary
    return op.RotaryEmbedding(
        x,
        cos,
        sin,
        interleaved=int(interleaved),
        num_heads=num_heads,
        rotary_embedding_dim=rotary_dim,
    )


def window_bias(
    op, bias: ir.Value, positions: ir.Value, window: int, dtype: ir.DataType
) -> ir.Value:
    """``bias [batch, 1, seq, seq]`` with keys farther than ``window`` from the query masked too.

    ``positions [1, seq]`` int64; a key is visible when ``|query - key| <= window``.
    Masked scores get the dtype's lowest finite value, as :func:`padding_bias` gives.
    """
    queries = op.Unsqueeze(positions, [-1])  # [1, seq, 1]
    keys = op.Unsqueeze(positions, [-2])  # [1, 1, seq]
    near = op.LessOrEqual(op.Abs(op.Sub(queries, keys)), window)  # [1, seq, seq]
    far = op.Constant(value=ir.tensor(np.array(lowest_value(dtype), dtype=dtype.numpy())))
    return op.Where(op.Unsqueeze(near, [1]), bias, far)
