"""GGUF blocks kept as they are: ``MatMulNBits`` / ``GatherBlockQuantized`` inputs, nothing re-rounded.

A weight stored as GGML blocks (see :mod:`mobius.weights._gguf_quant`) becomes

- its codes, laid out as ``MatMulNBits``' ``B`` (4 or 8 bits per value);
- its blocks' own fields, in their own types: the fp16 ``d``/``dmin`` of each block
  and a K-quant's 4- or 6-bit sub-scales and minimums (uint8 / int8);
- a few nodes that multiply those fields into the float scales and offsets the ops
  take. They read initializers only, so ONNX Runtime folds them into constants
  when it loads the model (before its kernels prepack the weights): the package on
  disk stays the size of the GGUF blocks, and the session runs as if the scales
  had been stored as floats.

The products are computed in float32, as llama.cpp's reference does, then cast to
the model's float type: in a float32 model every value equals the dequantized
GGUF weight to the bit.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from mobius.passes._fusion import FOLDED
from mobius.passes._int4 import Int4Weight, LazyParts, lazy_value
from mobius.weights._gguf_quant import BlockFields, block_layout, fields, stack_rows


class _BlockParts(LazyParts):
    """The parts of GGUF weights of one block type stacked along N, read on first use."""

    def __init__(self, sources) -> None:
        self.sources = list(sources)

    def _quantize(self) -> dict[str, np.ndarray]:
        weight = stack_rows([source.repack() for source in self.sources])
        parts = {"packed": weight.packed}
        for kind, factors in _factor_kinds(weight.fields):
            for i, factor in enumerate(factors):
                parts[f"{kind}{i}"] = factor
        return parts


def _factor_kinds(f: BlockFields):
    return (("scale", f.scale_factors), ("offset", f.offset_factors))


def probe(type_name: str) -> BlockFields:
    """The fields of one all-zero block: the bits, block size and factor shapes of a type."""
    block, size = block_layout(type_name)
    return fields(np.zeros(size, np.uint8), type_name, 1, block)


def block_weight(
    graph: ir.Graph, name: str, sources, float_type: ir.DataType, prelude: list, *, packed_rank=3
) -> Int4Weight:
    """Register ``sources``' blocks (one block type, rows stacked) as inputs of the int4 ops.

    ``sources`` are GGUF weights ``[N_i, K]`` (rows = output features, ``repack()``
    giving :class:`~mobius.weights.RepackedWeight`). The folded nodes computing the
    scales and offsets are appended to ``prelude``; the caller puts them at the
    top of the graph. ``packed_rank=2`` stores the codes as ``[N, blocks*bytes]``,
    the shape ``GatherBlockQuantized`` reads (same bytes).
    """
    shape = probe(sources[0].type_name)
    n, k = sum(int(s.shape[0]) for s in sources), int(sources[0].shape[1])
    blocks, type_blocks = k // shape.block_size, k // block_layout(sources[0].type_name)[0]
    row_bytes = shape.block_size * shape.bits // 8
    parts = _BlockParts(sources)
    packed_shape = [n, blocks, row_bytes] if packed_rank == 3 else [n, blocks * row_bytes]
    packed = lazy_value(parts, "packed", ir.DataType.UINT8, packed_shape, f"{name}.blocks")
    graph.register_initializer(packed)
    products = {}
    for kind, factors in _factor_kinds(shape):
        values = []
        for i, factor in enumerate(factors):
            dtype = ir.DataType.from_numpy(factor.dtype)
            value = lazy_value(
                parts, f"{kind}{i}", dtype, [n, type_blocks, factor.shape[-1]], f"{name}.{kind}{i}"
            )
            graph.register_initializer(value)
            values.append(value)
        if values:
            sign = shape.offset_sign if kind == "offset" else 1.0
            products[kind] = _product(values, sign, [n, blocks], prelude, f"{name}/{kind}")
    shift = (1 << (shape.bits - 1)) - shape.zero_point
    if shift:
        # Codes spanning the whole 4-bit range (Q4_1, Q4_K: zero point 0) are read around
        # MatMulNBits' default zero point 8 instead, the difference moved into the offsets
        # (q s + o = (q - 8) s + (o + 8 s), one float32 rounding): an explicit zero-point
        # input halves ONNX Runtime's int8-activation kernel speed.
        scaled = _node(
            prelude, "Mul", [products["scale"], _float(prelude, shift, name)], f"{name}/shift"
        )
        products["offset"] = _node(
            prelude, "Add", [products["offset"], scaled], f"{name}/offset_shifted"
        )
    outs = {
        kind: _as_type(value, float_type, [n, blocks], prelude, name, kind)
        for kind, value in products.items()
    }
    return Int4Weight(
        packed,
        outs["scale"],
        None,
        k,
        n,
        shape.block_size,
        shape.bits,
        row_offsets=outs.get("offset"),
    )


def _node(prelude: list, op: str, inputs, name: str, **attributes) -> ir.Value:
    node = ir.node(op, inputs, attributes, name=name)
    prelude.append(node)
    out = node.outputs[0]
    out.meta[FOLDED] = True
    return out


def _product(values, sign, shape, prelude, base) -> ir.Value:
    """``sign * prod(values)`` in float32, reshaped to ``shape``."""
    floats = [
        _node(prelude, "Cast", [v], f"{base}/cast{i}", to=ir.DataType.FLOAT)
        for i, v in enumerate(values)
    ]
    out = floats[0]
    for i, value in enumerate(floats[1:]):
        out = _node(prelude, "Mul", [out, value], f"{base}/mul{i}")
    if sign != 1.0:
        out = _node(prelude, "Neg", [out], f"{base}/neg")
    return _node(
        prelude, "Reshape", [out, _ints(prelude, shape, f"{base}/shape")], f"{base}/reshape"
    )


def _as_type(value, float_type, shape, prelude, name, kind) -> ir.Value:
    """``value`` (float32) in the model's float type, named and typed as the ops' input."""
    if float_type != ir.DataType.FLOAT:
        value = _node(prelude, "Cast", [value], f"{name}/{kind}/to_float_type", to=float_type)
    value.name = f"{name}.{kind}s"
    value.type, value.shape = ir.TensorType(float_type), ir.Shape(shape)
    return value


def _float(prelude: list, number: float, name: str) -> ir.Value:
    return _node(
        prelude, "Constant", [], f"{name}/shift_by", value=ir.tensor(np.array(number, np.float32))
    )


def transposed(value: ir.Value, prelude: list) -> ir.Value:
    """``value [N, blocks]`` as ``[blocks, N]`` (MatMulNBits' offsets), folded at load."""
    out = _node(prelude, "Transpose", [value], f"{value.name}/transpose", perm=[1, 0])
    out.name = f"{value.name}.by_block"
    out.type, out.shape = value.type, ir.Shape(list(reversed(value.shape)))
    return out


def block_ones(k: int, block_size: int, dtype: ir.DataType, prelude: list) -> ir.Value:
    """The ``[K, K/block_size]`` 0/1 matrix that sums each block of ``x``, folded at load.

    One per graph, K, block size and type; it is made from its shape alone, so the
    package stores no bytes of it.
    """
    name = f"gguf.block_ones.{k}.{block_size}.{dtype.name.lower()}"
    made = next((n.outputs[0] for n in prelude if n.outputs[0].name == name), None)
    if made is not None:
        return made
    blocks = k // block_size
    square = _ints(prelude, [blocks, blocks], f"{name}/square")
    zeros = _node(
        prelude,
        "ConstantOfShape",
        [square],
        f"{name}/zeros",
        value=ir.tensor(np.zeros(1, dtype.numpy())),
    )
    eye = _node(prelude, "EyeLike", [zeros], f"{name}/eye")  # [blocks, blocks]
    rows = _node(prelude, "Unsqueeze", [eye, _ints(prelude, [1], f"{name}/axis")], f"{name}/rows")
    repeat = _ints(prelude, [blocks, block_size, blocks], f"{name}/repeat")
    repeated = _node(prelude, "Expand", [rows, repeat], f"{name}/repeated")
    shape = _ints(prelude, [k, blocks], f"{name}/shape")
    out = _node(prelude, "Reshape", [repeated, shape], f"{name}/reshape")  # row i: block i // bs
    out.name = name
    out.type, out.shape = ir.TensorType(dtype), ir.Shape([k, blocks])
    return out


def _ints(prelude: list, values: list[int], name: str) -> ir.Value:
    return _node(prelude, "Constant", [], name, value=ir.tensor(np.array(values, np.int64)))
