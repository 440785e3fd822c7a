"""Weight-only int4 quantization of MatMul weights to ONNX Runtime's ``MatMulNBits``.

Round-to-nearest (RTN) per block of ``block_size`` input channels, for every
output column: symmetric (codes ``-7..7`` around the default zero point 8) or
asymmetric (a 4-bit zero point per block). Weights are quantized lazily, one at a
time, while the model is written, so memory stays near the largest weight.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

MS_DOMAIN = "com.microsoft"
BLOCK_SIZES = (16, 32, 64, 128, 256)


def quantize_blocks(weight: np.ndarray, block_size: int, symmetric: bool):
    """RTN-quantize ``weight [K, N]`` (MatMul layout) per column in blocks along K.

    Returns ``(packed [N, blocks, block_size/2] uint8, scales [N, blocks] float32,
    zero_points [N, blocks] uint8 or None)``; code ``2i`` sits in the low nibble.
    """
    k, n = weight.shape
    blocks = -(-k // block_size)
    w = np.zeros((n, blocks * block_size), np.float32)
    w[:, :k] = weight.astype(np.float32).T
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


def dequantize_blocks(packed, scales, zero_points, k: int) -> np.ndarray:
    """The ``[K, N]`` weight that ``quantize_blocks``' output stands for (for tests and checks)."""
    codes = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(*packed.shape[:2], -1)
    zp = 8 if zero_points is None else zero_points[..., None]
    w = (codes.astype(np.float32) - zp) * scales[..., None]
    return w.reshape(w.shape[0], -1)[:, :k].T


def _pack_zero_points(zero_points: np.ndarray) -> np.ndarray:
    n, blocks = zero_points.shape
    padded = np.zeros((n, blocks + blocks % 2), np.uint8)
    padded[:, :blocks] = zero_points
    return (padded[:, 0::2] | (padded[:, 1::2] << 4)).reshape(-1)


class _QuantizedWeight:
    """Quantizes one weight on first use and serves its parts until each has been read."""

    def __init__(self, source: ir.TensorProtocol, block_size: int, symmetric: bool) -> None:
        self.source, self.block_size, self.symmetric = source, block_size, symmetric
        self._parts: dict[str, np.ndarray] | None = None
        self._unread: set[str] = set()

    def part(self, name: str) -> np.ndarray:
        if self._parts is None:
            packed, scales, zero_points = quantize_blocks(
                self.source.numpy(), self.block_size, self.symmetric
            )
            self._parts = {"packed": packed, "scales": scales.reshape(-1)}
            if zero_points is not None:
                self._parts["zero_points"] = _pack_zero_points(zero_points)
            self._unread = set(self._parts)
        value = self._parts[name]
        self._unread.discard(name)
        if not self._unread:
            self._parts = None  # every part is written: free the memory
        return value


def _lazy(quantized: _QuantizedWeight, part: str, dtype: ir.DataType, shape, name: str, cast=None):
    def load() -> ir.Tensor:
        array = quantized.part(part)
        return ir.Tensor(array.astype(cast) if cast is not None else array, name=name)

    return ir.LazyTensor(load, dtype=dtype, shape=ir.Shape(shape), name=name)


def quantize_int4(
    model: ir.Model,
    *,
    block_size: int = 32,
    symmetric: bool = True,
    accuracy_level: int = 4,
) -> int:
    """Replace each ``MatMul`` by a 2-D weight initializer with ``MatMulNBits`` (4 bits).

    Must run after the weights are applied. Returns how many MatMuls were replaced.
    """
    if block_size not in BLOCK_SIZES:
        raise ValueError(f"block size must be one of {BLOCK_SIZES}, not {block_size}")
    graph = model.graph
    count = 0
    for node in list(graph):
        if node.op_type != "MatMul" or node.domain != "":
            continue
        weight = node.inputs[1]
        if weight is None or not weight.is_initializer() or weight.const_value is None:
            continue
        if len(weight.shape) != 2 or len(weight.uses()) != 1:
            continue
        k, n = (int(d) for d in weight.shape)
        blocks = -(-k // block_size)
        quantized = _QuantizedWeight(weight.const_value, block_size, symmetric)
        base = weight.name
        packed = ir.Value(
            name=f"{base}.int4",
            type=ir.TensorType(ir.DataType.UINT8),
            shape=ir.Shape([n, blocks, block_size // 2]),
            const_value=_lazy(
                quantized, "packed", ir.DataType.UINT8, [n, blocks, block_size // 2], f"{base}.int4"
            ),
        )
        scales = ir.Value(
            name=f"{base}.scales",
            type=ir.TensorType(weight.dtype),
            shape=ir.Shape([n * blocks]),
            const_value=_lazy(
                quantized,
                "scales",
                weight.dtype,
                [n * blocks],
                f"{base}.scales",
                weight.dtype.numpy(),
            ),
        )
        inputs = [node.inputs[0], packed, scales]
        new_inits = [packed, scales]
        if not symmetric:
            zp_len = n * ((blocks + 1) // 2)
            zero_points = ir.Value(
                name=f"{base}.zero_points",
                type=ir.TensorType(ir.DataType.UINT8),
                shape=ir.Shape([zp_len]),
                const_value=_lazy(
                    quantized, "zero_points", ir.DataType.UINT8, [zp_len], f"{base}.zero_points"
                ),
            )
            inputs.append(zero_points)
            new_inits.append(zero_points)
        replacement = ir.node(
            "MatMulNBits",
            inputs=inputs,
            attributes={
                "K": k,
                "N": n,
                "bits": 4,
                "block_size": block_size,
                "accuracy_level": accuracy_level,
            },
            domain=MS_DOMAIN,
            name=node.name,
        )
        for value in new_inits:
            graph.register_initializer(value)
        ir.convenience.replace_nodes_and_values(
            graph, node, [node], [replacement], node.outputs, replacement.outputs
        )
        graph.initializers.pop(base)
        count += 1
    if count:
        graph.opset_imports[MS_DOMAIN] = 1
        model.opset_imports[MS_DOMAIN] = 1
    return count
