"""Overlapping chunks for a codec that encodes a clip a chunk at a time (EnCodec 48 kHz).

transformers' ``EncodecModel`` cuts the padded clip at every ``stride`` samples
into chunks of ``chunk_length`` (the last ones shorter), encodes each on its own,
decodes each, and cross-fades the decoded chunks with triangular weights
(``_linear_overlap_add``). Its feature extractor pads a batch to
``(n - 1) * stride + chunk_length`` samples: ``n`` whole chunks, and, when the
chunks overlap, one short chunk of ``chunk_length - stride`` samples at
``n * stride``. The graphs here take that layout: the whole chunks go through the
model as one batch, the short one on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir


@dataclass(frozen=True)
class ChunkLayout:
    """The chunking of a clip padded by the feature extractor (all lengths in samples)."""

    length: int  # chunk_length
    stride: int
    hop: int  # samples per code frame

    @property
    def tail(self) -> int:
        """The short last chunk (0: the chunks do not overlap, there is none)."""
        return self.length - self.stride

    @property
    def frames(self) -> int:
        """Code frames of a whole chunk."""
        return -(-self.length // self.hop)

    @property
    def tail_frames(self) -> int:
        return -(-self.tail // self.hop)

    @property
    def decoded(self) -> int:
        """Samples the decoder gives for a whole chunk's codes."""
        return self.frames * self.hop

    def weights(self) -> np.ndarray:
        """transformers' triangle over a decoded whole chunk: highest in its middle."""
        time = np.linspace(0, 1, self.decoded + 2, dtype=np.float64)[1:-1]
        return (0.5 - np.abs(time - 0.5)).astype(np.float32)


def _ints(op, *values):
    return op.Constant(value=ir.tensor(np.array(values, dtype=np.int64)))


def whole_chunks(op, input_values, layout: ChunkLayout):
    """``[batch * n, channels, length]`` (batch-major) and ``n`` (int64 ``[1]``)."""
    samples = op.Shape(input_values, start=2, end=3)
    whole = op.Div(op.Sub(samples, _ints(op, layout.length)), _ints(op, layout.stride))
    count = op.Add(whole, _ints(op, 1))
    starts = op.Range(op.Constant(value_int=0), op.Squeeze(count, [0]), op.Constant(value_int=1))
    starts = op.Mul(starts, op.Constant(value_int=layout.stride))
    offsets = op.Range(
        op.Constant(value_int=0), op.Constant(value_int=layout.length), op.Constant(value_int=1)
    )
    index = op.Add(op.Unsqueeze(starts, [1]), op.Unsqueeze(offsets, [0]))  # [n, length]
    chunks = op.Transpose(op.Gather(input_values, index, axis=2), perm=[0, 2, 1, 3])
    channels = op.Shape(input_values, start=1, end=2)
    flat = op.Concat(_ints(op, -1), channels, _ints(op, layout.length), axis=0)
    return op.Reshape(chunks, flat), count


def tail_chunk(op, input_values, layout: ChunkLayout):
    """The short last chunk: the clip's last ``length - stride`` samples."""
    return op.Slice(input_values, _ints(op, -layout.tail), _ints(op, 2**62), _ints(op, 2))


def frames_by_chunk(op, codes, count, layout: ChunkLayout):
    """Whole chunks' codes ``[batch * n, K, F]`` -> ``[batch, K, n * F]`` (chunk after chunk)."""
    stages = op.Shape(codes, start=1, end=2)
    split = op.Concat(_ints(op, -1), count, stages, _ints(op, layout.frames), axis=0)
    by_chunk = op.Transpose(op.Reshape(codes, split), perm=[0, 2, 1, 3])  # [b, K, n, F]
    return op.Reshape(by_chunk, _ints(op, 0, 0, -1))


def chunk_codes(op, audio_codes, count, layout: ChunkLayout):
    """``[batch, K, n * F (+ tail frames)]`` -> the whole chunks' ``[batch * n, K, F]`` and the
    tail's ``[batch, K, tail frames]`` (None without a tail)."""
    whole = op.Mul(count, _ints(op, layout.frames))
    head = op.Slice(audio_codes, _ints(op, 0), whole, _ints(op, 2))
    stages = op.Shape(audio_codes, start=1, end=2)
    split = op.Concat(_ints(op, 0), stages, count, _ints(op, layout.frames), axis=0)
    by_chunk = op.Transpose(op.Reshape(head, split), perm=[0, 2, 1, 3])  # [b, n, K, F]
    flat = op.Concat(_ints(op, -1), stages, _ints(op, layout.frames), axis=0)
    tail = None
    if layout.tail:
        tail = op.Slice(audio_codes, whole, _ints(op, 2**62), _ints(op, 2))
    return op.Reshape(by_chunk, flat), tail


def overlap_add(op, decoded, tail, count, layout: ChunkLayout):
    """transformers' ``_linear_overlap_add`` of the decoded chunks.

    ``decoded`` ``[batch * n, channels, decoded]`` (batch-major), ``tail`` ``[batch,
    channels, tail frames * hop]`` or None. Each chunk is weighted by the triangle and
    laid at ``chunk * stride``; the sum is divided by the summed weights. As a chunk
    reaches at most ``stride`` samples into the next (the config is checked for it),
    each stride-long span is one chunk's head plus the previous chunk's rest.
    """
    size, stride = layout.decoded, layout.stride
    weights = layout.weights()
    channels = op.Shape(decoded, start=1, end=2)
    shape = op.Concat(_ints(op, -1), count, channels, _ints(op, size), axis=0)
    chunks = op.Reshape(decoded, shape)  # [b, n, ch, size]
    chunk_weights = op.Expand(
        op.Constant(value=ir.tensor(weights)), op.Concat(count, _ints(op, size), axis=0)
    )  # [n, size]
    last = size
    if tail is not None:
        last = layout.tail_frames * layout.hop
        padded = op.Pad(tail, _ints(op, 0, 0, 0, 0, 0, size - last))
        chunks = op.Concat(chunks, op.Unsqueeze(padded, [1]), axis=1)
        tail_weights = np.where(np.arange(size) < last, weights, 0).astype(np.float32)
        tail_row = op.Constant(value=ir.tensor(tail_weights[None]))
        chunk_weights = op.Concat(chunk_weights, tail_row, axis=0)  # [n + 1, size]
    weighted = op.Mul(chunks, op.Unsqueeze(chunk_weights, [1]))  # weights [C, 1, size]
    spans = _spans(op, weighted, stride, size, axis=1)
    weight_spans = _spans(op, chunk_weights, stride, size, axis=0)
    chunks_laid = op.Shape(chunk_weights, start=0, end=1)
    length = op.Add(op.Mul(op.Sub(chunks_laid, _ints(op, 1)), _ints(op, stride)), _ints(op, last))
    out = op.Slice(spans, _ints(op, 0), length, _ints(op, -1))
    weight_sum = op.Slice(weight_spans, _ints(op, 0), length, _ints(op, -1))
    return op.Div(out, weight_sum)


def _spans(op, weighted, stride: int, size: int, axis: int):
    """Chunks along ``axis`` (each ``size`` long on the last axis) laid ``stride`` apart and summed,
    flattened onto the last axis: ``(chunks + 1) * stride`` samples."""
    rank_after = 2 if axis == 1 else 1  # [b, C, ch, size] or [C, size]
    head = op.Slice(weighted, _ints(op, 0), _ints(op, stride), _ints(op, -1))
    rest = op.Slice(weighted, _ints(op, stride), _ints(op, size), _ints(op, -1))
    rest = op.Pad(rest, _pads(op, axis, rank_after, last=2 * stride - size, before_chunk=1))
    head = op.Pad(head, _pads(op, axis, rank_after, last=0, after_chunk=1))
    summed = op.Add(rest, head)  # [.., C + 1, .., stride]: span c = rest(c - 1) + head(c)
    if axis == 1:
        summed = op.Transpose(summed, perm=[0, 2, 1, 3])
        return op.Reshape(summed, _ints(op, 0, 0, -1))
    return op.Reshape(summed, _ints(op, -1))


def _pads(
    op, axis: int, rank_after: int, *, last: int, before_chunk: int = 0, after_chunk: int = 0
):
    """``Pad``'s pads: ``before_chunk``/``after_chunk`` on the chunk axis, ``last`` at the end."""
    rank = axis + 1 + rank_after
    begin, end = [0] * rank, [0] * rank
    begin[axis], end[axis] = before_chunk, after_chunk
    end[-1] = last
    return _ints(op, *begin, *end)
