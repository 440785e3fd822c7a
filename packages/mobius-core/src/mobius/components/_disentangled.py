"""DeBERTa's disentangled attention: content and relative-position terms added to ``q·k``.

A score adds to ``q·k`` a content-to-position term (``c2p``: the query against the
projected embedding of the distance ``i - j``) and a position-to-content one
(``p2c``: the key against the projected embedding of ``j - i``). The relative table
has ``2 * span`` rows; row ``span + d`` holds distance ``d``, clipped to the table.
Shared by DeBERTa (v1, v2/v3) in mobius-text and SEW-D in mobius-audio.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components._attention import lowest_value
from mobius.components._linear import Linear

FLOAT = ir.DataType.FLOAT


def float_constant(op, value: float, like):
    """A float32 scalar constant cast like ``like``."""
    return op.CastLike(op.Constant(value=ir.tensor(np.array(value, np.float32))), like)


def sequence_length(op, x):
    """The second axis of ``x`` as an int64 scalar."""
    return op.Squeeze(op.Slice(op.Shape(x), [1], [2]), [0])


def relative_positions(op, seq_len):
    """``[seq, seq]`` int64: ``i - j`` for query ``i`` and key ``j``."""
    ids = op.Range(0, seq_len, 1)
    return op.Sub(op.Unsqueeze(ids, [1]), op.Unsqueeze(ids, [0]))


def log_bucket_positions(op, rel_pos, bucket_size: int, max_position: int):
    """transformers' ``make_log_bucket_position``, in float32 as there: exact within ``±mid``, log-spaced beyond."""
    mid = bucket_size // 2
    ints = lambda v: op.Constant(value=ir.tensor(np.array(v, np.int64)))  # noqa: E731
    floats = lambda v: op.Constant(value=ir.tensor(np.array(v, np.float32)))  # noqa: E731
    near = op.And(op.Less(rel_pos, ints(mid)), op.Greater(rel_pos, ints(-mid)))
    abs_pos = op.Where(near, ints(mid - 1), op.Abs(rel_pos))
    ratio = op.Div(
        op.Log(op.Div(op.Cast(abs_pos, to=FLOAT), floats(mid))),
        floats(np.log(np.float32((max_position - 1) / mid))),
    )
    log_pos = op.Add(op.Ceil(op.Mul(ratio, floats(mid - 1))), floats(mid))
    signed = op.Mul(log_pos, op.Cast(op.Sign(rel_pos), to=FLOAT))
    bucket = op.Where(op.LessOrEqual(abs_pos, ints(mid)), op.Cast(rel_pos, to=FLOAT), signed)
    return op.Cast(bucket, to=ir.DataType.INT64)


def split_heads(op, x, num_heads: int):
    """``[batch, seq, heads*dim]`` -> ``[batch, heads, seq, dim]``."""
    return op.Transpose(op.Reshape(x, [0, 0, num_heads, -1]), perm=[0, 2, 1, 3])


def positions_as_keys(op, projected, num_heads: int, head_dim: int):
    """Projected relative embeddings ``[2*span, heads*dim]`` -> ``[heads, dim, 2*span]``."""
    return op.Transpose(op.Reshape(projected, [-1, num_heads, head_dim]), perm=[1, 2, 0])


def gather_by_distance(op, scores, index):
    """``scores [b, h, n, 2*span]`` picked at ``index [n, n]`` -> ``[b, h, n, n]``."""
    shape = op.Concat(op.Shape(scores, start=0, end=3), op.Shape(scores, start=2, end=3), axis=0)
    return op.GatherElements(scores, op.Expand(index, shape), axis=3)


def c2p_scores(op, q, pos_key, rel_pos, span, top):
    """``q [b, h, n, d]`` against ``pos_key [h, d, 2*span]`` at row ``clip(i - j + span, 0, top)``."""
    index = op.Clip(op.Add(rel_pos, span), op.Constant(value_int=0), top)
    return gather_by_distance(op, op.MatMul(q, pos_key), index)  # [b, h, query, key]


def p2c_scores(op, k, pos_query, rel_pos, span, top):
    """``k [b, h, n, d]`` against ``pos_query [h, d, 2*span]`` at row ``clip(j - i + span)``, as [b, h, query, key]."""
    index = op.Clip(op.Sub(span, rel_pos), op.Constant(value_int=0), top)
    p2c = gather_by_distance(op, op.MatMul(k, pos_query), index)  # [b, h, key, query]
    return op.Transpose(p2c, perm=[0, 1, 3, 2])


def masked_softmax_attention(op, scores, mask, v):
    """``softmax(scores filled with the lowest value where ~mask) @ v``, heads merged.

    ``mask`` is bool and broadcasts to ``scores [b, h, n, n]``: a pair mask
    ``[b, 1, n, n]`` or a key-only mask ``[b, 1, 1, n]``.
    """
    lowest = float_constant(op, lowest_value(scores.dtype or FLOAT), scores)
    probs = op.Softmax(op.Where(mask, scores, lowest), axis=-1)  # [b, h, n, n]
    context = op.Transpose(op.MatMul(probs, v), perm=[0, 2, 1, 3])  # [b, n, h, d]
    return op.Reshape(context, [0, 0, -1])


class RelativeEmbeddings(nn.Module):
    """The table of relative-distance embeddings ``[rows, hidden]``, read whole."""

    def __init__(self, rows: int, hidden: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([rows, hidden])

    def forward(self, op):
        return self.weight


class DisentangledSelfAttention(nn.Module):
    """DeBERTa-v2 attention: ``(q·k + c2p + p2c) / sqrt(head_dim * (1 + #terms))`` over a fixed span.

    Parameters follow transformers' checkpoints: biased ``query_proj``, ``key_proj``,
    ``value_proj``, and ``pos_key_proj`` (c2p) / ``pos_query_proj`` (p2c) unless
    ``share_att_key`` projects positions with the content projections.

    Args:
        hidden_size: input width.
        num_heads, head_dim: the attention heads.
        relative_attention: whether the c2p/p2c terms are added at all.
        pos_att_type: the terms, among ``"c2p"`` and ``"p2c"``; they count in the
            scale even without ``relative_attention``, as in transformers.
        span: half the rows of the relative table (``position_buckets`` when
            bucketed, else ``max_relative_positions``).
        share_att_key: positions projected by ``key_proj`` / ``query_proj``.
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        head_dim: int,
        *,
        relative_attention: bool,
        pos_att_type: tuple[str, ...],
        span: int,
        share_att_key: bool,
    ) -> None:
        super().__init__()
        width = num_heads * head_dim
        self.query_proj = Linear(hidden_size, width, bias=True)
        self.key_proj = Linear(hidden_size, width, bias=True)
        self.value_proj = Linear(hidden_size, width, bias=True)
        self.kinds = tuple(pos_att_type) if relative_attention else ()
        own = relative_attention and not share_att_key
        self.pos_key_proj = (
            Linear(hidden_size, width, True) if own and "c2p" in self.kinds else None
        )
        self.pos_query_proj = (
            Linear(hidden_size, width, True) if own and "p2c" in self.kinds else None
        )
        self.share_att_key, self.span = share_att_key, span
        self.heads = (num_heads, head_dim)
        scale_factor = 1 + sum(kind in pos_att_type for kind in ("c2p", "p2c"))
        self.scale = float(np.sqrt(np.float32(head_dim * scale_factor)))

    def forward(self, op, x, mask, rel_pos, rel_embeddings):
        """``x [b, n, hidden]``, bool ``mask`` broadcasting to ``[b, h, n, n]``, ``rel_pos [n, n]``."""
        heads = self.heads[0]
        q = split_heads(op, self.query_proj(op, x), heads)  # [b, h, n, d]
        k = split_heads(op, self.key_proj(op, x), heads)
        v = split_heads(op, self.value_proj(op, x), heads)
        scale = float_constant(op, self.scale, q)
        scores = op.MatMul(q, op.Div(op.Transpose(k, perm=[0, 1, 3, 2]), scale))  # [b, h, n, n]
        if self.kinds:
            scores = op.Add(scores, self.relative_scores(op, q, k, rel_pos, rel_embeddings, scale))
        return masked_softmax_attention(op, scores, mask, v)

    def relative_scores(self, op, q, k, rel_pos, rel_embeddings, scale):
        """c2p + p2c: distances shifted by ``span`` and clipped to the table's ``2 * span`` rows."""
        span = self.span
        window = op.Slice(rel_embeddings, [0], [2 * span], [0])  # [2*span, hidden]
        key_proj = self.key_proj if self.share_att_key else self.pos_key_proj
        query_proj = self.query_proj if self.share_att_key else self.pos_query_proj
        shift, top = op.Constant(value_int=span), op.Constant(value_int=2 * span - 1)
        score = None
        if "c2p" in self.kinds:
            pos_key = positions_as_keys(op, key_proj(op, window), *self.heads)
            score = op.Div(c2p_scores(op, q, pos_key, rel_pos, shift, top), scale)
        if "p2c" in self.kinds:
            pos_query = positions_as_keys(op, query_proj(op, window), *self.heads)
            p2c = op.Div(p2c_scores(op, k, pos_query, rel_pos, shift, top), scale)
            score = p2c if score is None else op.Add(score, p2c)
        return score
