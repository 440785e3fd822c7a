"""Weight-only int4 quantization to ONNX Runtime's ``MatMulNBits`` and ``GatherBlockQuantized``.

Round-to-nearest (RTN) per block of ``block_size`` input channels, for every
output column: symmetric (codes ``-7..7`` around the default zero point 8) or
asymmetric (a 4-bit zero point per block). Weights are quantized lazily, one at a
time, while the model is written, so memory stays near the largest weight.

This module holds the arithmetic and the lazy tensors; the graph rewrites and
:func:`quantize_int4` live in :mod:`mobius.passes._int4_pass`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

BLOCK_SIZES = (16, 32, 64, 128, 256)
FLOAT_TYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
# Rows are quantized a few MB at a time, so the float32 temporaries stay small
# next to the weight itself.
_CHUNK_BYTES = 1 << 24


def _quantize_rows(rows: np.ndarray, block_size: int, symmetric: bool):
    """RTN-quantize ``rows [N, K]`` in blocks along K; see :func:`quantize_blocks`."""
    n, k = rows.shape
    blocks = -(-k // block_size)
    w = np.zeros((n, blocks * block_size), np.float32)
    w[:, :k] = rows
    w = w.reshape(n, blocks, block_size)
    if symmetric:
        scales = np.abs(w).max(axis=-1) / 7.0
        scales[scales == 0] = 1.0
        codes = np.clip(np.rint(w / scales[..., None]) + 8, 0, 15)
        zero_points = None
    else:
        low, high = np.minimum(w.min(axis=-1), 0.0), np.maximum(w.max(axis=-1), 0.0)
        scales = (high - low) / 15.0
        scales[scales == 0] = 1.0
        zero_points = np.clip(np.rint(-low / scales), 0, 15).astype(np.uint8)
        codes = np.clip(np.rint(w / scales[..., None]) + zero_points[..., None], 0, 15)
    codes = codes.astype(np.uint8)
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return packed, scales.astype(np.float32), zero_points


def quantize_blocks(weight: np.ndarray, block_size: int, symmetric: bool):
    """RTN-quantize ``weight [K, N]`` (MatMul layout) per column in blocks along K.

    Returns ``(packed [N, blocks, block_size/2] uint8, scales [N, blocks] float32,
    zero_points [N, blocks] uint8 or None)``; code ``2i`` sits in the low nibble.
    An embedding table ``[vocab, hidden]`` is ``quantize_blocks(table.T, ...)``:
    one row per token, blocks along ``hidden``.
    """
    return _quantize_rows(weight.T, block_size, symmetric)


def dequantize_blocks(packed, scales, zero_points, k: int) -> np.ndarray:
    """The ``[K, N]`` weight that ``quantize_blocks``' output stands for (for tests and checks)."""
    codes = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(*packed.shape[:2], -1)
    zp = 8 if zero_points is None else zero_points[..., None]
    w = (codes.astype(np.float32) - zp) * scales[..., None]
    return w.reshape(w.shape[0], -1)[:, :k].T


def pack_zero_points(zero_points: np.ndarray) -> np.ndarray:
    """Pack ``[N, blocks]`` 4-bit zero points two per byte along blocks: ``[N, ceil(blocks/2)]``.

    The layout both ``MatMulNBits`` and a 2-D ``GatherBlockQuantized`` read.
    """
    n, blocks = zero_points.shape
    padded = np.zeros((n, blocks + blocks % 2), np.uint8)
    padded[:, :blocks] = zero_points
    return padded[:, 0::2] | (padded[:, 1::2] << 4)


class _LazyParts:
    """Computes a weight's parts on first use and serves them until each has been read."""

    _parts: dict[str, np.ndarray] | None = None
    _unread: frozenset[str] | set[str] = frozenset()

    def _quantize(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def part(self, name: str) -> np.ndarray:
        if self._parts is None:
            self._parts = self._quantize()
            self._unread = set(self._parts)
        value = self._parts[name]
        self._unread.discard(name)
        if not self._unread:
            self._parts = None  # every part is written: free the memory
        return value


class _QuantizedWeight(_LazyParts):
    """Quantizes one weight on first use and serves its parts until each has been read.

    ``rows_first`` says the source is ``[N, K]`` (an embedding table, or a ``Gemm``
    weight with ``transB``) rather than MatMul's ``[K, N]``.
    """

    def __init__(
        self, source: ir.TensorProtocol, block_size: int, symmetric: bool, rows_first: bool
    ) -> None:
        self.source, self.block_size, self.symmetric = source, block_size, symmetric
        self.rows_first = rows_first

    def _quantize(self) -> dict[str, np.ndarray]:
        n = int(self.source.shape[0 if self.rows_first else 1])
        k = int(self.source.shape[1 if self.rows_first else 0])
        blocks = -(-k // self.block_size)
        packed = np.empty((n, blocks, self.block_size // 2), np.uint8)
        scales = np.empty((n, blocks), np.float32)
        zero_points = None if self.symmetric else np.empty((n, blocks), np.uint8)
        for start, rows in self._row_chunks():  # rows [count, K]
            chunk_packed, chunk_scales, chunk_zero_points = _quantize_rows(
                rows, self.block_size, self.symmetric
            )
            stop = start + len(rows)
            packed[start:stop], scales[start:stop] = chunk_packed, chunk_scales
            if zero_points is not None:
                zero_points[start:stop] = chunk_zero_points
        parts = {"packed": packed, "scales": scales}
        if zero_points is not None:
            parts["zero_points"] = pack_zero_points(zero_points)
        return parts

    def _row_chunks(self):
        """``(first row, rows [count, K])`` runs of the ``[N, K]`` weight, a few MB each.

        A transposed checkpoint weight streams its rows straight from the file
        (no full ``[K, N]`` copy); anything else is read whole, then sliced.
        """
        stream_rows = None if self.rows_first else getattr(self.source, "transposed_rows", None)
        stream = stream_rows(_CHUNK_BYTES) if stream_rows is not None else None
        if stream is not None:
            yield from stream
            return
        array = self.source.numpy()
        rows = array if self.rows_first else array.T
        step = max(1, _CHUNK_BYTES // (4 * max(1, rows.shape[1])))
        for start in range(0, rows.shape[0], step):
            yield start, rows[start : start + step]


@dataclass
class Int4Weight:
    """The initializers of one quantized weight: what ``MatMulNBits`` takes as B, scales, zero_points.

    Weights repacked from GGUF blocks (:func:`repacked_weight`) may have 8 bits,
    and Q4_1's per-block ``offsets`` to add as ``(x @ block_ones) @ offsets``.
    """

    packed: ir.Value  # [N, blocks, block_size*bits/8] uint8
    scales: ir.Value  # [N, blocks], the weight's float type
    zero_points: ir.Value | None  # [N, ceil(blocks/2)] uint8, asymmetric only
    k: int
    n: int
    block_size: int
    bits: int = 4
    offsets: ir.Value | None = None  # [blocks, N], the weight's float type

    @property
    def blocks(self) -> int:
        return -(-self.k // self.block_size)


def _lazy_value(quantized, part, dtype, shape, name, cast=None) -> ir.Value:
    def load() -> ir.Tensor:
        array = quantized.part(part).reshape(shape)
        return ir.Tensor(array.astype(cast) if cast is not None else array, name=name)

    tensor = ir.LazyTensor(load, dtype=dtype, shape=ir.Shape(shape), name=name)
    return ir.Value(name=name, type=ir.TensorType(dtype), shape=ir.Shape(shape), const_value=tensor)


def int4_weight(
    graph: ir.Graph,
    weight: ir.Value,
    *,
    rows_first: bool,
    block_size: int,
    symmetric: bool,
    packed_rank: int = 3,
) -> Int4Weight:
    """Register the lazy int4 initializers that stand for ``weight`` in ``graph``.

    ``packed_rank=2`` stores the packed codes as ``[N, blocks*block_size/2]``
    (same bytes), the shape ``GatherBlockQuantized`` reads.
    """
    if rows_first:
        n, k = (int(d) for d in weight.shape)
    else:
        k, n = (int(d) for d in weight.shape)
    blocks = -(-k // block_size)
    quantized = _QuantizedWeight(weight.const_value, block_size, symmetric, rows_first)
    base = _free_name(graph, weight.name)
    packed_shape = (
        [n, blocks, block_size // 2] if packed_rank == 3 else [n, blocks * block_size // 2]
    )
    packed = _lazy_value(quantized, "packed", ir.DataType.UINT8, packed_shape, f"{base}.int4")
    scales = _lazy_value(
        quantized, "scales", weight.dtype, [n, blocks], f"{base}.scales", weight.dtype.numpy()
    )
    zero_points = None
    if not symmetric:
        zero_points = _lazy_value(
            quantized,
            "zero_points",
            ir.DataType.UINT8,
            [n, (blocks + 1) // 2],
            f"{base}.zero_points",
        )
    for value in (packed, scales, zero_points):
        if value is not None:
            graph.register_initializer(value)
    return Int4Weight(packed, scales, zero_points, k, n, block_size)


def _free_name(graph: ir.Graph, base: str) -> str:
    """``base``, or ``base.1``, ... when a weight is quantized in two layouts."""
    name, i = base, 0
    while f"{name}.scales" in graph.initializers:
        i += 1
        name = f"{base}.{i}"
    return name


class _RepackedParts(_LazyParts):
    """The ``MatMulNBits`` parts of GGUF weights stacked along N, repacked on first use.

    Each source has ``repack()`` giving a :class:`~mobius.weights.RepackedWeight`.
    Sources without offsets get zero offsets when others have them.
    """

    def __init__(self, sources, dtype: np.dtype, offsets: bool) -> None:
        self.sources, self.dtype, self.offsets = list(sources), dtype, offsets

    def _quantize(self) -> dict[str, np.ndarray]:
        repacked = [source.repack() for source in self.sources]
        parts = {
            "packed": _stack([r.packed for r in repacked]),
            "scales": _stack([r.scales for r in repacked]).astype(self.dtype, copy=False),
        }
        if self.offsets:
            offsets = [
                r.offsets if r.offsets is not None else np.zeros_like(r.scales.T) for r in repacked
            ]
            parts["offsets"] = _stack(offsets, axis=1).astype(self.dtype, copy=False)
        return parts


def _stack(arrays: list[np.ndarray], axis: int = 0) -> np.ndarray:
    """``np.concatenate``, without the copy for a single array (a large table's blocks)."""
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=axis)


def repacked_weight(
    graph: ir.Graph,
    weight: ir.Value,
    sources,
    *,
    bits: int,
    offsets: bool,
    packed_rank: int = 3,
) -> Int4Weight:
    """Register lazy initializers holding GGUF blocks of ``sources`` for ``weight``, unchanged.

    ``sources`` are GGUF weights ``[N_i, K]`` (rows = output features) whose rows,
    stacked, are ``weight``'s output features; their blocks (32 values, ``bits``
    4 or 8) are copied, not re-rounded, when the model is written. ``offsets``
    says some are Q4_1 (see :class:`~mobius.weights._gguf_quant.RepackedWeight`).
    """
    block_size = 32
    n, k = sum(int(s.shape[0]) for s in sources), int(sources[0].shape[1])
    blocks = k // block_size
    parts = _RepackedParts(sources, weight.dtype.numpy(), offsets)
    base = _free_name(graph, weight.name)
    row_bytes = block_size * bits // 8
    packed_shape = [n, blocks, row_bytes] if packed_rank == 3 else [n, blocks * row_bytes]
    suffix = "int4" if bits == 4 else "int8"
    packed = _lazy_value(parts, "packed", ir.DataType.UINT8, packed_shape, f"{base}.{suffix}")
    scales = _lazy_value(parts, "scales", weight.dtype, [n, blocks], f"{base}.scales")
    values = [packed, scales]
    if offsets:
        values.append(_lazy_value(parts, "offsets", weight.dtype, [blocks, n], f"{base}.offsets"))
    for value in values:
        graph.register_initializer(value)
    return Int4Weight(packed, scales, None, k, n, block_size, bits, values[2] if offsets else None)


def block_ones(graph: ir.Graph, k: int, dtype: ir.DataType, block_size: int = 32) -> ir.Value:
    """The ``[K, K/block_size]`` 0/1 matrix that sums each block of ``x`` (one per graph and K)."""
    name = f"gguf.block_ones.{k}"
    if name in graph.initializers:
        return graph.initializers[name]
    blocks = k // block_size

    def load() -> ir.Tensor:
        ones = np.repeat(np.eye(blocks, dtype=dtype.numpy()), block_size, axis=0)
        return ir.Tensor(ones, name=name)

    shape = ir.Shape([k, blocks])
    value = ir.Value(
        name=name,
        type=ir.TensorType(dtype),
        shape=shape,
        const_value=ir.LazyTensor(load, dtype=dtype, shape=shape, name=name),
    )
    graph.register_initializer(value)
    return value
