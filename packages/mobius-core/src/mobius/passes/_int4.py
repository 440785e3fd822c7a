"""Weight-only quantization to ONNX Runtime's ``MatMulNBits`` and ``GatherBlockQuantized``.

Per block of ``block_size`` input channels, for every output column, 4- or 8-bit
codes: symmetric (around the default zero point ``2**(bits-1)``) or asymmetric
(a zero point per block). Two ways to choose a block's scale and zero point
(``method``): round-to-nearest from the block's extremes (``"rtn"``), or a few
half-quadratic refits that lower the block's error (``"hqq"``, see
:mod:`mobius.passes._hqq`). Weights are quantized lazily, one at a time, while
the model is written, so memory stays near the largest weight.

This module holds the arithmetic and the lazy tensors; the graph rewrites and
:func:`quantize_int4` live in :mod:`mobius.passes._int4_pass`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from mobius.passes._hqq import fit_blocks

BLOCK_SIZES = (16, 32, 64, 128, 256)
BITS = (4, 8)
ROUNDING_METHODS = ("hqq", "rtn")
FLOAT_TYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
# Rows are quantized a few MB at a time, so the float32 temporaries stay small
# next to the weight itself.
_CHUNK_BYTES = 1 << 24


def _rtn_blocks(w: np.ndarray, bits: int, symmetric: bool):
    """Round-to-nearest codes ``[N, blocks, block]``, scales and zero points of blocked ``w``."""
    top, mid = (1 << bits) - 1, 1 << (bits - 1)
    if symmetric:
        scales = np.abs(w).max(axis=-1) / (mid - 1)
        scales[scales == 0] = 1.0
        codes = np.clip(np.rint(w / scales[..., None]) + mid, 0, top)
        zero_points = None
    else:
        low, high = np.minimum(w.min(axis=-1), 0.0), np.maximum(w.max(axis=-1), 0.0)
        scales = (high - low) / top
        scales[scales == 0] = 1.0
        zero_points = np.clip(np.rint(-low / scales), 0, top).astype(np.uint8)
        codes = np.clip(np.rint(w / scales[..., None]) + zero_points[..., None], 0, top)
    return codes.astype(np.uint8), scales.astype(np.float32), zero_points


def _quantize_rows(
    rows: np.ndarray, block_size: int, symmetric: bool, bits: int = 4, method: str = "rtn"
):
    """Quantize ``rows [N, K]`` in blocks along K; see :func:`quantize_blocks`."""
    n, k = rows.shape
    blocks = -(-k // block_size)
    w = np.zeros((n, blocks * block_size), np.float32)
    w[:, :k] = rows
    w = w.reshape(n, blocks, block_size)
    codes, scales, zero_points = _rtn_blocks(w, bits, symmetric)
    if method == "hqq":
        # Padding past K is not part of the weight: it must not pull the fit.
        valid = None if k == blocks * block_size else (np.arange(blocks * block_size) < k)
        codes, scales, zero_points = fit_blocks(w, scales, zero_points, bits, symmetric, valid)
    elif method != "rtn":
        raise ValueError(f"rounding method must be one of {ROUNDING_METHODS}, not {method!r}")
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4) if bits == 4 else codes
    return packed, scales, zero_points


def quantize_blocks(
    weight: np.ndarray, block_size: int, symmetric: bool, *, bits: int = 4, method: str = "rtn"
):
    """Quantize ``weight [K, N]`` (MatMul layout) per column in blocks along K.

    Returns ``(packed, scales [N, blocks] float32, zero_points [N, blocks] uint8 or
    None)``. ``packed`` is ``[N, blocks, block_size/2]`` for 4 bits (code ``2i`` in
    the low nibble) or ``[N, blocks, block_size]`` for 8. ``method`` is ``"rtn"``
    or ``"hqq"`` (see the module doc). An embedding table ``[vocab, hidden]`` is
    ``quantize_blocks(table.T, ...)``: one row per token, blocks along ``hidden``.
    """
    return _quantize_rows(weight.T, block_size, symmetric, bits, method)


def dequantize_blocks(packed, scales, zero_points, k: int, bits: int = 4) -> np.ndarray:
    """The ``[K, N]`` weight that ``quantize_blocks``' output stands for (for tests and checks)."""
    if bits == 4:
        codes = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(*packed.shape[:2], -1)
    else:
        codes = packed
    zp = 1 << (bits - 1) if zero_points is None else zero_points[..., None]
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


class LazyParts:
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


class _QuantizedWeight(LazyParts):
    """Quantizes one weight on first use and serves its parts until each has been read.

    ``rows_first`` says the source is ``[N, K]`` (an embedding table, or a ``Gemm``
    weight with ``transB``) rather than MatMul's ``[K, N]``.
    """

    def __init__(
        self,
        source: ir.TensorProtocol,
        block_size: int,
        symmetric: bool,
        rows_first: bool,
        bits: int = 4,
        method: str = "rtn",
    ) -> None:
        self.source, self.block_size, self.symmetric = source, block_size, symmetric
        self.rows_first, self.bits, self.method = rows_first, bits, method

    def _quantize(self) -> dict[str, np.ndarray]:
        n = int(self.source.shape[0 if self.rows_first else 1])
        k = int(self.source.shape[1 if self.rows_first else 0])
        blocks = -(-k // self.block_size)
        packed = np.empty((n, blocks, self.block_size * self.bits // 8), np.uint8)
        scales = np.empty((n, blocks), np.float32)
        zero_points = None if self.symmetric else np.empty((n, blocks), np.uint8)
        for start, rows in self._row_chunks():  # rows [count, K]
            chunk_packed, chunk_scales, chunk_zero_points = _quantize_rows(
                rows, self.block_size, self.symmetric, self.bits, self.method
            )
            stop = start + len(rows)
            packed[start:stop], scales[start:stop] = chunk_packed, chunk_scales
            if zero_points is not None:
                zero_points[start:stop] = chunk_zero_points
        parts = {"packed": packed, "scales": scales}
        if zero_points is not None:  # 8-bit zero points take a byte each
            parts["zero_points"] = pack_zero_points(zero_points) if self.bits == 4 else zero_points
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

    Weights kept from GGUF blocks (:func:`mobius.passes._blocks.block_weight`) may
    have 8 bits, blocks of 16, explicit zero points, and per-block ``offsets`` to
    add as ``(x @ block_ones) @ offsets``; their scales and offsets are computed
    from the blocks' own fields by nodes ONNX Runtime folds when it loads the model.
    """

    packed: ir.Value  # [N, blocks, block_size*bits/8] uint8
    scales: ir.Value  # [N, blocks], the weight's float type
    zero_points: ir.Value | None  # [N, ceil(blocks/2)] uint8 (4 bits) or [N, blocks] (8)
    k: int
    n: int
    block_size: int
    bits: int = 4
    offsets: ir.Value | None = None  # [blocks, N], the weight's float type
    row_offsets: ir.Value | None = None  # [N, blocks]: the same, by row (GatherBlockQuantized)

    @property
    def blocks(self) -> int:
        return -(-self.k // self.block_size)


def lazy_value(quantized, part, dtype, shape, name, cast=None) -> ir.Value:
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
    bits: int = 4,
    method: str = "rtn",
) -> Int4Weight:
    """Register the lazy 4- or 8-bit initializers that stand for ``weight`` in ``graph``.

    ``packed_rank=2`` stores the packed codes as ``[N, blocks*block_size*bits/8]``
    (same bytes), the shape ``GatherBlockQuantized`` reads. ``method``: ``"rtn"``
    or ``"hqq"`` (see the module doc).
    """
    if rows_first:
        n, k = (int(d) for d in weight.shape)
    else:
        k, n = (int(d) for d in weight.shape)
    blocks = -(-k // block_size)
    quantized = _QuantizedWeight(
        weight.const_value, block_size, symmetric, rows_first, bits, method
    )
    base = weight.name
    i = 0
    while f"{base}.scales" in graph.initializers:  # quantized in two layouts
        i += 1
        base = f"{weight.name}.{i}"
    row_bytes = block_size * bits // 8
    packed_shape = [n, blocks, row_bytes] if packed_rank == 3 else [n, blocks * row_bytes]
    packed = lazy_value(quantized, "packed", ir.DataType.UINT8, packed_shape, f"{base}.int{bits}")
    scales = lazy_value(
        quantized, "scales", weight.dtype, [n, blocks], f"{base}.scales", weight.dtype.numpy()
    )
    zero_points = None
    if not symmetric:
        zero_points = lazy_value(
            quantized,
            "zero_points",
            ir.DataType.UINT8,
            [n, (blocks + 1) // 2 if bits == 4 else blocks],
            f"{base}.zero_points",
        )
    for value in (packed, scales, zero_points):
        if value is not None:
            graph.register_initializer(value)
    return Int4Weight(packed, scales, zero_points, k, n, block_size, bits)
