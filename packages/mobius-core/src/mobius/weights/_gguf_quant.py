"""GGML block formats: dequantization to float32, and repacking into ``MatMulNBits`` blocks.

A quantized GGML row of ``K`` values is ``K / block`` blocks of ``type_size`` bytes
each. In the 4-bit formats a block's 16 code bytes hold value ``j`` in the low
nibble of byte ``j`` and value ``j + 16`` in its high nibble; ``MatMulNBits``
wants value ``2i`` in the low nibble of byte ``i`` and ``2i + 1`` in its high
nibble. Repacking is that nibble shuffle plus the fp16 scales widened to float32:
no value is re-rounded.

A GGUF weight of shape ``[N, K]`` (PyTorch ``Linear`` layout, blocks along ``K``)
is exactly ``MatMulNBits``' ``B [N, K/block, blob]``: its rows are output features.
"""

from __future__ import annotations

from dataclasses import dataclass

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

#: The types whose blocks map onto ``MatMulNBits`` without re-rounding.
REPACKABLE = ("Q4_0", "Q4_1", "Q8_0")
#: Bits per code of each repackable type in ``MatMulNBits``.
REPACKED_BITS = {"Q4_0": 4, "Q4_1": 4, "Q8_0": 8}
#: Repackable types whose blocks carry an additive term (``RepackedWeight.offsets``).
HAS_OFFSETS = frozenset({"Q4_1"})


@dataclass
class RepackedWeight:
    """A GGUF weight re-laid out as ``MatMulNBits`` inputs; it stands for ``W [K, N]`` with

    ``W[k, n] = (code[n, k] - zero_point) * scales[n, k // block_size]
    (+ offsets[k // block_size, n] when offsets is not None)``.

    Attributes:
        packed: ``[N, K / block_size, block_size * bits / 8]`` uint8, the ``B`` input.
        scales: ``[N, K / block_size]`` float32 (flatten it for the ``scales`` input).
        zero_points: always None: the default zero point ``2**(bits-1)`` applies.
        bits: 4 or 8.
        block_size: 32 for every GGML format repacked here.
        k: input features; n: output features.
        offsets: ``[K / block_size, N]`` float32 per-block additive terms, or None.
            Q4_1 blocks are ``d * q + m``; with the default zero point 8 that is
            ``(q - 8) * d + (m + 8 d)``, and ``m + 8 d`` is added as
            ``blocksum(x) @ offsets`` (see :func:`matmul_nbits_nodes`). A
            float ``zero_points`` input would encode it too, but ONNX Runtime's CPU
            kernel then dequantizes the whole weight on every call (about 20x slower).
    """

    packed: np.ndarray
    scales: np.ndarray
    zero_points: np.ndarray | None
    bits: int
    block_size: int
    k: int
    n: int
    offsets: np.ndarray | None = None

    def dequantize(self) -> np.ndarray:
        """The ``[K, N]`` float32 weight these parts stand for (for tests and checks)."""
        if self.bits == 4:
            codes = np.stack([self.packed & 0x0F, self.packed >> 4], axis=-1)
        else:
            codes = self.packed
        codes = codes.reshape(self.n, -1, self.block_size).astype(np.float32)
        w = (codes - 2 ** (self.bits - 1)) * self.scales[..., None]
        if self.offsets is not None:
            w = w + self.offsets.T[..., None]
        return np.ascontiguousarray(w.reshape(self.n, self.k).T)

    def take_rows(self, rows: np.ndarray) -> RepackedWeight:
        """The weight of the output features ``rows`` (rows of ``B``), in that order.

        Un-permutes llama Q/K rows, and splits fused projections (Phi-3's ``qkv_proj``).
        """
        return RepackedWeight(
            self.packed[rows],
            self.scales[rows],
            None,
            self.bits,
            self.block_size,
            self.k,
            len(rows),
            None if self.offsets is None else self.offsets[:, rows],
        )


def _f16(blocks: np.ndarray, start: int) -> np.ndarray:
    """The fp16 field at byte ``start`` of each block, as float32 ``[..., 1]``."""
    return blocks[..., start : start + 2].copy().view(np.float16).astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """GGML 4-bit codes ``[..., 16]`` bytes -> ``[..., 32]`` values in element order."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _high_bits(qh: np.ndarray) -> np.ndarray:
    """The 5th bits of Q5 blocks: 4 little-endian bytes -> ``[..., 32]`` values 0/16."""
    return np.unpackbits(qh, axis=-1, bitorder="little") << 4


def _q4_0(b):
    return _f16(b, 0) * (_nibbles(b[..., 2:]).astype(np.float32) - 8)


def _q4_1(b):
    return _f16(b, 0) * _nibbles(b[..., 4:]).astype(np.float32) + _f16(b, 2)


def _q5_0(b):
    q = _nibbles(b[..., 6:]) | _high_bits(b[..., 2:6])
    return _f16(b, 0) * (q.astype(np.float32) - 16)


def _q5_1(b):
    q = _nibbles(b[..., 8:]) | _high_bits(b[..., 4:8])
    return _f16(b, 0) * q.astype(np.float32) + _f16(b, 2)


def _q8_0(b):
    return _f16(b, 0) * b[..., 2:].view(np.int8).astype(np.float32)


def _k_scales(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unpack the 12-byte 6-bit (scale, min) pairs of Q4_K/Q5_K into two ``[..., 8]`` arrays."""
    d, m, md = s[..., 0:4], s[..., 4:8], s[..., 8:12]
    scales = np.concatenate([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mins = np.concatenate([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return scales.astype(np.float32), mins.astype(np.float32)


def _q4_k(b):
    sc, mn = _k_scales(b[..., 4:16])
    d, dmin = _f16(b, 0), _f16(b, 2)
    # 4 chunks of 32 bytes; each gives 32 low-nibble values then 32 high-nibble values.
    qs = b[..., 16:].reshape(*b.shape[:-1], 4, 1, 32)
    q = ((qs >> np.array([0, 4], np.uint8).reshape(2, 1)) & 0x0F).reshape(*b.shape[:-1], 8, 32)
    w = (d * sc)[..., None] * q.astype(np.float32) - (dmin * mn)[..., None]
    return w.reshape(*b.shape[:-1], 256)


def _q6_k(b):
    lead = b.shape[:-1]
    ql, qh, sc = b[..., :128], b[..., 128:192], b[..., 192:208].view(np.int8)
    d = _f16(b, 208)
    low = (ql.reshape(*lead, 2, 1, 64) >> np.array([0, 4], np.uint8).reshape(2, 1)) & 0x0F
    low = low.reshape(*lead, 2, 4, 32)  # halves of 128 values, 4 runs of 32
    high = (qh.reshape(*lead, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(4, 1)) & 3
    q = (low | (high << 4)).astype(np.int8) - 32
    w = (d * sc.astype(np.float32)).reshape(*lead, 16, 1) * q.reshape(*lead, 16, 16)
    return w.reshape(*lead, 256)


_BLOCK_DEQUANT = {
    "Q4_0": _q4_0,
    "Q4_1": _q4_1,
    "Q5_0": _q5_0,
    "Q5_1": _q5_1,
    "Q8_0": _q8_0,
    "Q4_K": _q4_k,
    "Q6_K": _q6_k,
}

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
    return type_name in _BLOCK_DEQUANT or type_name in _PLAIN


def dequantize(raw: np.ndarray, type_name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Decode the raw bytes of a tensor of GGML type ``type_name`` into float32 of ``shape``.

    Integer types are returned as they are. ``raw`` is a flat uint8 array of the
    exact size (the caller checked it).
    """
    if type_name in _PLAIN:
        array = raw.view(_PLAIN[type_name]).reshape(shape)
        # F32 stays a zero-copy view of the mapped file.
        return array if array.dtype.kind in "iu" else array.astype(np.float32, copy=False)
    _, block, size = next(t for t in GGML_TYPES.values() if t[0] == type_name)
    blocks = raw.reshape(-1, size)
    out = np.empty((blocks.shape[0], block), np.float32)
    step = 1 << 16  # blocks per chunk: bounds the temporaries of large tensors
    for start in range(0, blocks.shape[0], step):
        out[start : start + step] = _BLOCK_DEQUANT[type_name](blocks[start : start + step])
    return out.reshape(shape)


def repack(raw: np.ndarray, type_name: str, n: int, k: int) -> RepackedWeight:
    """Re-lay the blocks of an ``[N, K]`` Q4_0, Q4_1 or Q8_0 weight for ``MatMulNBits``."""
    _, block, size = next(t for t in GGML_TYPES.values() if t[0] == type_name)
    b = raw.reshape(n, k // block, size)
    scales = _f16(b, 0)[..., 0]
    offsets = None
    if type_name == "Q8_0":
        # int8 q -> uint8 code q + 128 (flip the sign bit); default zero point 128.
        return RepackedWeight(b[..., 2:] ^ np.uint8(0x80), scales, None, 8, block, k, n)
    codes = _nibbles(b[..., 4:] if type_name == "Q4_1" else b[..., 2:])
    if type_name == "Q4_1":
        offsets = np.ascontiguousarray((_f16(b, 2)[..., 0] + 8 * scales).T)
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return RepackedWeight(packed, scales, None, 4, block, k, n, offsets)


def matmul_nbits_nodes(x, weight: RepackedWeight, name: str, accuracy_level: int = 4):
    """The nodes and initializers computing ``x @ W`` for a repacked weight.

    ``x`` is an ``onnx_ir.Value`` of float32 ``[..., K]``. Returns
    ``(nodes, initializers, output)``: one ``MatMulNBits``, and for Q4_1 the block
    offsets as ``(x @ block_ones) @ offsets`` added to it. ``block_ones [K, K/32]``
    sums each block of ``x``; it is named ``gguf.block_ones.{K}`` and is the same for
    every weight with that K, so register it once per graph. ONNX Runtime merges the
    identical sums of weights that share ``x`` (q/k/v, gate/up) and fuses each
    ``MatMul`` + ``Add`` into a ``Gemm``. The caller registers the initializers and
    sets opset ``com.microsoft`` 1. Scales are float32: cast them for another dtype.
    """
    import onnx_ir as ir

    def init(value_name: str, array: np.ndarray) -> ir.Value:
        array = np.ascontiguousarray(array)
        return ir.Value(
            name=value_name,
            type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
            shape=ir.Shape(array.shape),
            const_value=ir.Tensor(array, name=value_name),
        )

    packed, scales = (
        init(f"{name}.packed", weight.packed),
        init(f"{name}.scales", weight.scales.reshape(-1)),
    )
    attributes = {"K": weight.k, "N": weight.n, "bits": weight.bits}
    attributes |= {"block_size": weight.block_size, "accuracy_level": accuracy_level}
    node = ir.node(
        "MatMulNBits", [x, packed, scales], attributes, domain="com.microsoft", name=name
    )
    nodes, inits = [node], [packed, scales]
    if weight.offsets is None:
        return nodes, inits, node.outputs[0]
    blocks = weight.k // weight.block_size
    ones = np.repeat(np.eye(blocks, dtype=np.float32), weight.block_size, axis=0)
    ones_value = init(f"gguf.block_ones.{weight.k}", ones)
    offsets = init(f"{name}.offsets", weight.offsets)
    sums = ir.node("MatMul", [x, ones_value], name=f"{name}.block_sums")
    shift = ir.node("MatMul", [sums.outputs[0], offsets], name=f"{name}.block_offsets")
    add = ir.node("Add", [node.outputs[0], shift.outputs[0]], name=f"{name}.add_offsets")
    return [*nodes, sums, shift, add], [*inits, ones_value, offsets], add.outputs[0]
