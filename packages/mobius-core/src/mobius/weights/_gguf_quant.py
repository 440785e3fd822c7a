"""GGML block formats: their fields, decoding to float32, and repacking for ``MatMulNBits``.

A quantized GGML row of ``K`` values is ``K / block`` blocks of ``type_size`` bytes.
Every block type used in GGUF files decodes, per sub-block of 16 or 32 values, as

    w = (code - zero_point) * scale + offset

with small integer codes, ``scale`` and ``offset`` products of the block's fp16
fields and small integer sub-scales (K-quants' two-level scales). :func:`fields`
reads those parts; :func:`dequantize` evaluates the formula in float32, in the
order llama.cpp's reference does, and :func:`repack` lays the same parts out as
``MatMulNBits`` wants them: codes of 4 bits (Q4_*, and Q2_K/Q3_K widened) or 8 bits
(Q8_0, and Q5_*/Q6_K widened: 5- and 6-bit codes have no exact 4-bit form), value
``2i`` in the low nibble of byte ``i``. No value is re-rounded.

A GGUF weight of shape ``[N, K]`` (PyTorch ``Linear`` layout, blocks along ``K``) is
exactly ``MatMulNBits``' ``B [N, K/block, blob]``: its rows are output features.
The facts (byte layouts) come from ggml's ``ggml-common.h`` as the ``gguf`` package
documents them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import ml_dtypes
import numpy as np

# GGML type id -> (name, values per block, bytes per block), from ggml.h.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    30: ("BF16", 1, 2),
}


@dataclass
class BlockFields:
    """The parts of ``R`` rows of one block type: ``w = (code - zero_point) * scale + offset``.

    Attributes:
        codes: ``[R, K]`` uint8, in element order.
        bits: 4 or 8: the ``MatMulNBits`` width that holds the codes exactly.
        block_size: values per scale (16 or 32).
        zero_point: the same for every block: ``2**(bits-1)`` (``MatMulNBits``'
            default) or 0 (codes that use the whole 4-bit range: Q4_1, Q4_K).
        scale_factors: arrays ``[R, G, P]`` whose float32 product (in order,
            broadcast) reshaped to ``[R, K / block_size]`` is the scale: the fp16
            ``d`` of a block, times a K-quant's integer sub-scale.
        offset_factors: the same for the offset (empty: none), times ``offset_sign``.
    """

    codes: np.ndarray
    bits: int
    block_size: int
    zero_point: int
    scale_factors: tuple[np.ndarray, ...]
    offset_factors: tuple[np.ndarray, ...] = ()
    offset_sign: float = 1.0

    def scales(self) -> np.ndarray:
        """``[R, K / block_size]`` float32."""
        return _product(self.scale_factors, len(self.codes))

    def offsets(self) -> np.ndarray | None:
        """``[R, K / block_size]`` float32, or None."""
        if not self.offset_factors:
            return None
        return np.float32(self.offset_sign) * _product(self.offset_factors, len(self.codes))

    def dequantize(self) -> np.ndarray:
        """``[R, K]`` float32: the formula, evaluated as llama.cpp's reference does."""
        rows = len(self.codes)
        q = self.codes.reshape(rows, -1, self.block_size).astype(np.float32)
        w = (q - np.float32(self.zero_point)) * self.scales()[..., None]
        offsets = self.offsets()
        if offsets is not None:
            w = w + offsets[..., None]
        return w.reshape(rows, -1)


def _product(factors: tuple[np.ndarray, ...], rows: int) -> np.ndarray:
    out = factors[0].astype(np.float32)
    for factor in factors[1:]:
        out = out * factor.astype(np.float32)
    return out.reshape(rows, -1)


def _f16(blocks: np.ndarray, start: int) -> np.ndarray:
    """The fp16 field at byte ``start`` of each block: ``[R, blocks, 1]`` float16."""
    return blocks[..., start : start + 2].copy().view(np.float16)


def _rows(values: np.ndarray) -> np.ndarray:
    """``[R, blocks, ...]`` -> ``[R, K]``."""
    return values.reshape(values.shape[0], -1)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """4-bit codes of Q4_0/Q4_1/Q5_*: 16 bytes -> 32 values, low nibbles first."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _fifth_bits(qh: np.ndarray) -> np.ndarray:
    """The 5th bits of Q5_0/Q5_1 blocks: 4 little-endian bytes -> 32 values of 0 or 16."""
    return np.unpackbits(qh, axis=-1, bitorder="little") << 4


def _shifted(qs: np.ndarray, shifts: list[int], mask: int) -> np.ndarray:
    """``qs [R, b, c, n]`` -> ``[R, b, c, len(shifts), n]``: each shift of each run, masked."""
    return (qs[..., None, :] >> np.array(shifts, np.uint8)[:, None]) & np.uint8(mask)


def _k_scales(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 12-byte 6-bit (scale, min) pairs of Q4_K/Q5_K -> two ``[R, b, 8]`` uint8 arrays."""
    d, m, md = s[..., 0:4], s[..., 4:8], s[..., 8:12]
    scales = np.concatenate([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mins = np.concatenate([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return scales, mins


def _q4_0(b):
    return BlockFields(_rows(_nibbles(b[..., 2:])), 4, 32, 8, (_f16(b, 0),))


def _q4_1(b):
    return BlockFields(_rows(_nibbles(b[..., 4:])), 4, 32, 0, (_f16(b, 0),), (_f16(b, 2),))


def _q5_0(b):
    q = _nibbles(b[..., 6:]) | _fifth_bits(b[..., 2:6])
    return BlockFields(_rows(q + np.uint8(112)), 8, 32, 128, (_f16(b, 0),))  # q - 16


def _q5_1(b):
    q = _nibbles(b[..., 8:]) | _fifth_bits(b[..., 4:8])
    return BlockFields(_rows(q + np.uint8(128)), 8, 32, 128, (_f16(b, 0),), (_f16(b, 2),))


def _q8_0(b):
    return BlockFields(_rows(b[..., 2:] ^ np.uint8(0x80)), 8, 32, 128, (_f16(b, 0),))  # int8 q


def _q2_k(b):
    r, n = b.shape[:2]
    q = _shifted(b[..., 16:80].reshape(r, n, 2, 32), [0, 2, 4, 6], 3)  # 2 runs x 4 shifts
    scales = (b[..., :16] & 0x0F, b[..., :16] >> 4)
    return BlockFields(
        _rows(q + np.uint8(8)), 4, 16, 8, (_f16(b, 80), scales[0]), (_f16(b, 82), scales[1]), -1.0
    )


def _q3_k(b):
    r, n = b.shape[:2]
    low = _shifted(b[..., 32:96].reshape(r, n, 2, 32), [0, 2, 4, 6], 3)
    high = _shifted(b[..., :32].reshape(r, n, 1, 32), list(range(8)), 1).reshape(low.shape)
    q = low + (high << 2) + np.uint8(4)  # q - 4 when the high bit is clear, + 8 for the code
    s = b[..., 96:108]
    low_s = _shifted(s[..., :8].reshape(r, n, 1, 8), [0, 4], 0x0F).reshape(r, n, 16)
    high_s = _shifted(s[..., 8:].reshape(r, n, 1, 4), [0, 2, 4, 6], 3).reshape(r, n, 16)
    sub = ((low_s | (high_s << 4)).astype(np.int16) - 32).astype(np.int8)
    return BlockFields(_rows(q), 4, 16, 8, (_f16(b, 108), sub))


def _q4_k(b):
    r, n = b.shape[:2]
    q = _shifted(b[..., 16:].reshape(r, n, 4, 32), [0, 4], 0x0F)  # 4 runs: low, then high
    sc, mn = _k_scales(b[..., 4:16])
    return BlockFields(_rows(q), 4, 32, 0, (_f16(b, 0), sc), (_f16(b, 2), mn), -1.0)


def _q5_k(b):
    r, n = b.shape[:2]
    low = _shifted(b[..., 48:].reshape(r, n, 4, 32), [0, 4], 0x0F)
    high = _shifted(b[..., 16:48].reshape(r, n, 1, 32), list(range(8)), 1).reshape(low.shape)
    sc, mn = _k_scales(b[..., 4:16])
    q = low | (high << 4)
    return BlockFields(
        _rows(q + np.uint8(128)), 8, 32, 128, (_f16(b, 0), sc), (_f16(b, 2), mn), -1.0
    )


def _q6_k(b):
    r, n = b.shape[:2]
    low = _shifted(b[..., :128].reshape(r, n, 2, 64), [0, 4], 0x0F)  # [.., 2, 2, 64]
    low = low.reshape(r, n, 2, 4, 32)  # per half of 128 values: 4 runs of 32
    high = _shifted(b[..., 128:192].reshape(r, n, 2, 32), [0, 2, 4, 6], 3)
    q = (low | (high << 4)) + np.uint8(96)  # q - 32 as an 8-bit code
    return BlockFields(_rows(q), 8, 16, 128, (_f16(b, 208), b[..., 192:208].view(np.int8)))


_FIELDS = {
    "Q4_0": _q4_0,
    "Q4_1": _q4_1,
    "Q5_0": _q5_0,
    "Q5_1": _q5_1,
    "Q8_0": _q8_0,
    "Q2_K": _q2_k,
    "Q3_K": _q3_k,
    "Q4_K": _q4_k,
    "Q5_K": _q5_k,
    "Q6_K": _q6_k,
}
#: The block types :func:`repack` keeps, with the ``MatMulNBits`` width they take.
REPACKABLE = tuple(_FIELDS)
#: What a build does with a block type's tensors, for the build log and ``mobius info``.
KEPT_AS = {
    "Q4_0": "4-bit blocks of 32",
    "Q4_1": "4-bit blocks of 32 with offsets",
    "Q5_0": "widened to 8-bit blocks of 32",
    "Q5_1": "widened to 8-bit blocks of 32 with offsets",
    "Q8_0": "8-bit blocks of 32",
    "Q2_K": "widened to 4-bit blocks of 16 with offsets",
    "Q3_K": "widened to 4-bit blocks of 16",
    "Q4_K": "4-bit blocks of 32 with offsets",
    "Q5_K": "widened to 8-bit blocks of 32 with offsets",
    "Q6_K": "widened to 8-bit blocks of 16",
}


def block_layout(type_name: str) -> tuple[int, int]:
    """``(values per block, bytes per block)`` of a GGML type."""
    _, block, size = next(t for t in GGML_TYPES.values() if t[0] == type_name)
    return block, size


def fields(raw: np.ndarray, type_name: str, rows: int, k: int) -> BlockFields:
    """The parts of ``rows`` rows of ``k`` values stored as ``type_name`` blocks in ``raw``."""
    block, size = block_layout(type_name)
    return _FIELDS[type_name](raw.reshape(rows, k // block, size))


@dataclass
class RepackedWeight:
    """A GGUF weight as ``MatMulNBits`` parts; it stands for ``W [K, N]`` with

    ``W[k, n] = (code[n, k] - zero_point) * scale[n, b] + offset[n, b]``, ``b = k // block_size``.

    Attributes:
        packed: ``[N, K / block_size, block_size * bits / 8]`` uint8, the ``B`` input.
        fields: the block fields (codes, scale and offset factors) of the N rows.
        k: input features; n: output features.
    """

    packed: np.ndarray
    fields: BlockFields
    k: int
    n: int

    @property
    def bits(self) -> int:
        return self.fields.bits

    @property
    def block_size(self) -> int:
        return self.fields.block_size

    def dequantize(self) -> np.ndarray:
        """The ``[K, N]`` float32 weight these parts stand for (for tests and checks)."""
        return np.ascontiguousarray(self.fields.dequantize().T)

    def take_rows(self, rows: np.ndarray) -> RepackedWeight:
        """The weight of the output features ``rows`` (rows of ``B``), in that order.

        Un-permutes llama Q/K rows, and splits fused projections (Phi-3's ``qkv_proj``).
        """
        f = self.fields
        picked = replace(
            f,
            codes=f.codes[rows],
            scale_factors=tuple(a[rows] for a in f.scale_factors),
            offset_factors=tuple(a[rows] for a in f.offset_factors),
        )
        return RepackedWeight(self.packed[rows], picked, self.k, len(rows))


def stack_rows(weights: list[RepackedWeight]) -> RepackedWeight:
    """Weights of one block type stacked along N (packed q/k/v, gate/up)."""
    first = weights[0]
    if len(weights) == 1:
        return first
    f = first.fields

    def cat(arrays):
        return np.concatenate(arrays, axis=0)

    stacked = replace(
        f,
        codes=cat([w.fields.codes for w in weights]),
        scale_factors=tuple(map(cat, zip(*(w.fields.scale_factors for w in weights), strict=True))),
        offset_factors=tuple(
            map(cat, zip(*(w.fields.offset_factors for w in weights), strict=True))
        ),
    )
    packed = cat([w.packed for w in weights])
    return RepackedWeight(packed, stacked, first.k, sum(w.n for w in weights))


_PLAIN = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F64": np.dtype("<f8"),
    "I8": np.dtype("<i1"),
    "I16": np.dtype("<i2"),
    "I32": np.dtype("<i4"),
    "I64": np.dtype("<i8"),
}


def can_dequantize(type_name: str) -> bool:
    """Whether :func:`dequantize` reads this GGML type."""
    return type_name in _FIELDS or type_name in _PLAIN


def dequantize(raw: np.ndarray, type_name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Decode the raw bytes of a tensor of GGML type ``type_name`` into float32 of ``shape``.

    Integer types are returned as they are. ``raw`` is a flat uint8 array of the
    exact size (the caller checked it).
    """
    if type_name in _PLAIN:
        array = raw.view(_PLAIN[type_name]).reshape(shape)
        # F32 stays a zero-copy view of the mapped file.
        return array if array.dtype.kind in "iu" else array.astype(np.float32, copy=False)
    block, size = block_layout(type_name)
    k = shape[-1]
    if 0 in shape:  # no elements, so no blocks: nothing to reshape into rows
        return np.zeros(shape, np.float32)
    rows = raw.reshape(-1, k // block * size)
    out = np.empty((len(rows), k), np.float32)
    step = max(1, (1 << 21) // k)  # rows per chunk: bounds the temporaries of large tensors
    for start in range(0, len(rows), step):
        chunk = rows[start : start + step]
        out[start : start + step] = fields(chunk, type_name, len(chunk), k).dequantize()
    return out.reshape(shape)


def repack(raw: np.ndarray, type_name: str, n: int, k: int) -> RepackedWeight:
    """Lay the blocks of an ``[N, K]`` weight out for ``MatMulNBits``, values unchanged."""
    f = fields(raw, type_name, n, k)
    codes = f.codes.reshape(n, k // f.block_size, f.block_size)
    packed = codes if f.bits == 8 else codes[..., 0::2] | (codes[..., 1::2] << 4)
    return RepackedWeight(np.ascontiguousarray(packed), f, k, n)


def nbytes(type_name: str, count: int) -> int:
    """Bytes of ``count`` values of a GGML type (whole blocks)."""
    block, size = block_layout(type_name)
    return math.ceil(count / block) * size
