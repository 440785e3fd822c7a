"""Hyper-connections: several residual streams per token instead of one.

The decoder carries ``streams [batch, seq, n, hidden]`` (the embedding copied ``n``
times). Before each block (attention or MLP) a small projection of the flattened,
RMS-scaled streams gives per-token weights: ``pre`` collapses the streams into the
block's input, ``post`` spreads the block's output back over the streams, and, where
the family has it, ``comb`` mixes the residual streams (a doubly-stochastic matrix
from Sinkhorn iterations, DeepSeek-V4's mHC). A head collapses the streams once more
before the final norm. Everything here runs in float32, as the references do.

Used by HY-V4 (no ``comb``, ``post`` scaled by ``hc_magnitude``) and DeepSeek-V4.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.components import TransposedParameter

FLOAT = ir.DataType.FLOAT


def flatten_streams(op, streams: ir.Value) -> ir.Value:
    """``[b, s, n, hidden]`` → float32 ``[b, s, n * hidden]``."""
    return op.Cast(op.Reshape(streams, op.Constant(value_ints=[0, 0, -1])), to=FLOAT)


def inverse_rms(op, x: ir.Value, eps: float) -> ir.Value:
    """``1 / sqrt(mean(x²) + eps)`` over the last axis, kept as ``[..., 1]``."""
    mean_square = op.ReduceMean(op.Mul(x, x), op.Constant(value_ints=[-1]), keepdims=1)
    return op.Reciprocal(op.Sqrt(op.Add(mean_square, op.Constant(value_float=eps))))


def stream_mixes(op, streams: ir.Value, fn: ir.Value, eps: float, norm_first: bool) -> ir.Value:
    """The projection ``fn`` of the RMS-scaled flattened streams, float32 ``[b, s, width]``.

    ``norm_first``: scale the streams then project (DeepSeek-V4); else project, then scale
    the result (HY-V4). The same product, rounded in the reference's order.
    """
    flat = flatten_streams(op, streams)
    scale = inverse_rms(op, flat, eps)
    if norm_first:
        return op.MatMul(op.Mul(flat, scale), fn)
    return op.Mul(op.MatMul(flat, fn), scale)


def collapse(op, streams: ir.Value, pre: ir.Value) -> ir.Value:
    """``sum_i pre[..., i] * streams[..., i, :]``: ``[b, s, n, hidden]`` → ``[b, s, hidden]``."""
    y = op.Mul(op.Unsqueeze(pre, [-1]), op.Cast(streams, to=FLOAT))
    return op.CastLike(op.ReduceSum(y, op.Constant(value_ints=[2]), keepdims=0), streams)


def expand(
    op, streams: ir.Value, block_out: ir.Value, post: ir.Value, comb: ir.Value | None = None
) -> ir.Value:
    """The new streams: ``post[..., i] * block_out + residual_i``, in float32.

    ``residual_i`` is ``streams_i``, or ``sum_j comb[..., j, i] * streams_j`` with ``comb``.
    """
    residual = op.Cast(streams, to=FLOAT)  # [b, s, n, hidden]
    if comb is not None:  # [b, s, n, n]: comb transposed times the streams
        residual = op.MatMul(op.Transpose(comb, perm=[0, 1, 3, 2]), residual)
    spread = op.Mul(op.Unsqueeze(post, [-1]), op.Unsqueeze(op.Cast(block_out, to=FLOAT), [-2]))
    return op.CastLike(op.Add(spread, residual), streams)


def sinkhorn(op, comb: ir.Value, iterations: int, eps: float) -> ir.Value:
    """Columns, then ``iterations - 1`` rows-and-columns normalisations of ``comb [..., n, n]``."""

    def normalise(x, axis):
        total = op.ReduceSum(x, op.Constant(value_ints=[axis]), keepdims=1)
        return op.Div(x, op.Add(total, op.Constant(value_float=eps)))

    comb = normalise(comb, -2)
    for _ in range(iterations - 1):
        comb = normalise(normalise(comb, -1), -2)
    return comb


class HyperConnection(nn.Module):
    """The weights of one block's hyper-connection: ``fn``, ``base`` and ``scale``.

    ``fn [width, n * hidden]`` projects the streams to ``[pre (n) | post (n) | comb (n*n)]``
    (``comb`` only when ``sinkhorn_iterations`` > 0), ``base [width]`` is added after the
    per-part ``scale``. ``pre = sigmoid(.) + hc_eps``; ``post = post_magnitude * sigmoid(.)``
    plus ``hc_eps`` when ``post_eps``; ``comb = sinkhorn(softmax(.) + hc_eps)``.
    ``forward`` returns ``(post, comb or None, the collapsed block input)``.
    """

    def __init__(
        self,
        num_streams: int,
        hidden_size: int,
        *,
        norm_eps: float,
        hc_eps: float,
        post_magnitude: float = 2.0,
        post_eps: bool = False,
        sinkhorn_iterations: int = 0,
        norm_first: bool = False,
    ) -> None:
        super().__init__()
        n = num_streams
        width = 2 * n + (n * n if sinkhorn_iterations else 0)
        self.fn = TransposedParameter(width, n * hidden_size)  # stored [n * hidden, width]
        self.base = nn.Parameter([width])
        self.scale = nn.Parameter([3 if sinkhorn_iterations else 2])
        self.n, self.norm_eps, self.hc_eps = n, norm_eps, hc_eps
        self.post_magnitude, self.post_eps = post_magnitude, post_eps
        self.iterations, self.norm_first = sinkhorn_iterations, norm_first

    def forward(self, op, streams: ir.Value):
        n = self.n
        mixes = stream_mixes(
            op, streams, op.Cast(self.fn, to=FLOAT), self.norm_eps, self.norm_first
        )
        base, scale = op.Cast(self.base, to=FLOAT), op.Cast(self.scale, to=FLOAT)
        parts = [n, n] + ([n * n] if self.iterations else [])
        mix = op.Split(mixes, parts, axis=-1, _outputs=len(parts))
        bias = op.Split(base, parts, axis=0, _outputs=len(parts))
        scales = op.Split(scale, [1] * len(parts), axis=0, _outputs=len(parts))
        logits = [op.Add(op.Mul(m, s), b) for m, s, b in zip(mix, scales, bias, strict=True)]
        pre = op.Add(op.Sigmoid(logits[0]), op.Constant(value_float=self.hc_eps))
        post = op.Mul(op.Sigmoid(logits[1]), op.Constant(value_float=self.post_magnitude))
        if self.post_eps:
            post = op.Add(post, op.Constant(value_float=self.hc_eps))
        comb = None
        if self.iterations:
            square = op.Reshape(logits[2], op.Constant(value_ints=[0, 0, n, n]))
            comb = op.Add(op.Softmax(square, axis=-1), op.Constant(value_float=self.hc_eps))
            comb = sinkhorn(op, comb, self.iterations, self.hc_eps)
        return post, comb, collapse(op, streams, pre)


class HyperHead(nn.Module):
    """The final collapse: ``sum_i (sigmoid(mix_i * hc_scale + hc_base_i) + eps) * streams_i``.

    Weights ``hc_fn [n, n * hidden]``, ``hc_base [n]``, ``hc_scale [1]``.
    """

    def __init__(
        self, num_streams: int, hidden_size: int, *, norm_eps: float, hc_eps: float, norm_first
    ) -> None:
        super().__init__()
        self.hc_fn = TransposedParameter(num_streams, num_streams * hidden_size)
        self.hc_base = nn.Parameter([num_streams])
        self.hc_scale = nn.Parameter([1])
        self.norm_eps, self.hc_eps, self.norm_first = norm_eps, hc_eps, norm_first

    def forward(self, op, streams: ir.Value) -> ir.Value:
        fn = op.Cast(self.hc_fn, to=FLOAT)
        mixes = stream_mixes(op, streams, fn, self.norm_eps, self.norm_first)  # [b, s, n]
        logits = op.Add(
            op.Mul(mixes, op.Cast(self.hc_scale, to=FLOAT)), op.Cast(self.hc_base, to=FLOAT)
        )
        pre = op.Add(op.Sigmoid(logits), op.Constant(value_float=self.hc_eps))
        return collapse(op, streams, pre)


def expand_embeddings(op, x: ir.Value, num_streams: int) -> ir.Value:
    """``[b, s, hidden]`` → ``[b, s, n, hidden]``, the embedding copied onto every stream."""
    return op.Expand(op.Unsqueeze(x, [2]), op.Constant(value_ints=[1, 1, num_streams, 1]))
