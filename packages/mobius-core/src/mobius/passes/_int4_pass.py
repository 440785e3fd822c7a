"""The int4 graph pass: MatMul/Gemm to ``MatMulNBits``, token embeddings to ``GatherBlockQuantized``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx_ir as ir

from mobius.components._linear import TransposedParameter
from mobius.components._runtime import MS_DOMAIN
from mobius.passes._fusion import CONCAT_OF, head_nodes
from mobius.passes._int4 import (
    BLOCK_SIZES,
    FLOAT_TYPES,
    Int4Weight,
    block_ones,
    int4_weight,
    repacked_weight,
)
from mobius.weights._gguf_quant import HAS_OFFSETS, REPACKED_BITS


def quantize_int4(
    model: ir.Model,
    *,
    block_size: int = 32,
    symmetric: bool = True,
    accuracy_level: int = 4,
    lm_head: bool = True,
    embeddings: bool = False,
    prequantized: Mapping[str, object] | None = None,
) -> int:
    """Store the model's weights as 4-bit blocks for ONNX Runtime's contrib ops.

    - Each ``MatMul`` by a 2-D weight initializer becomes ``MatMulNBits``.
    - ``lm_head`` (default on): the output head too, the MatMul or tied ``Gemm``
      (``transB``, reading the embedding table) that makes ``logits``. Off keeps
      it float. A tied head is quantized from the table; the embedding ``Gather``
      keeps the float table unless ``embeddings`` is also on.
    - ``embeddings`` (default off): each token-embedding ``Gather`` (indices
      ``input_ids``) becomes ``GatherBlockQuantized``. A table tied to a
      quantized head is stored once: both ops read the same packed data, scales
      and zero points.

    - ``prequantized`` maps initializer names to the GGUF weights they were
      applied from (items of a checkpoint whose weights are ``repackable`` and
      ``repack()`` to :class:`~mobius.weights.RepackedWeight`, as mobius-text's
      GGUF checkpoint's are; other values are ignored). A weight stored as Q4_0, Q4_1 or Q8_0 keeps its blocks: they
      are repacked for ``MatMulNBits`` (4 or 8 bits, block size 32 whatever
      ``block_size`` says, Q4_1's block minimums as ``(x @ block_ones) @
      offsets``), not dequantized and re-rounded. A tied Q4_0/Q8_0 table serves
      ``GatherBlockQuantized`` from the same bytes. A value may also be a list of
      GGUF weights whose rows, stacked, are the initializer's output features;
      an initializer whose ``meta[CONCAT_OF]`` is ``(values, axis)`` (packed
      q/k/v) is looked up that way by its parts' names. Everything else is
      quantized with RTN as usual.

    Must run after the weights are applied; the weights are quantized (or
    repacked) lazily, one at a time, when the model is saved. Returns how many
    nodes were replaced.
    """
    if block_size not in BLOCK_SIZES:
        raise ValueError(f"block size must be one of {BLOCK_SIZES}, not {block_size}")
    graph = model.graph
    rewrite = _Rewrite(graph, block_size, symmetric, accuracy_level, prequantized or {})
    heads = head_nodes(graph)
    count = 0
    for node in list(graph):
        if node.domain != "" or (node in heads and not lm_head):
            continue
        if node.op_type == "MatMul":
            count += rewrite.matmul(node)
        elif node.op_type == "Gemm" and node in heads:
            count += rewrite.gemm(node)
    # After the heads, so that a tied table's Gather finds the head's int4 data to share.
    if embeddings:
        for node in list(graph):
            if _is_token_embedding(node):
                count += rewrite.gather(node)
    rewrite.drop_unused_weights()
    if count:
        graph.opset_imports[MS_DOMAIN] = 1
        model.opset_imports[MS_DOMAIN] = 1
    return count


def _quantizable(weight: ir.Value | None) -> bool:
    return (
        weight is not None
        and weight.is_initializer()
        and weight.const_value is not None
        and weight.shape is not None
        and len(weight.shape) == 2
        and weight.dtype in FLOAT_TYPES
    )


def _is_token_embedding(node: ir.Node) -> bool:
    indices = node.inputs[1] if len(node.inputs) > 1 else None
    return (
        node.op_type == "Gather"
        and node.domain == ""
        and node.attributes.get_int("axis", 0) == 0
        and _quantizable(node.inputs[0])
        and indices is not None
        and indices.is_graph_input()
        and indices.name == "input_ids"
    )


def _constant(values, name: str) -> ir.Node:
    return ir.node(
        "Constant", [], attributes={"value": ir.tensor(np.array(values, np.int64))}, name=name
    )


def _gguf_sources(entry) -> list | None:
    """The GGUF weights of a ``prequantized`` entry, or None when it is not one."""
    sources = list(entry) if isinstance(entry, Sequence) and not isinstance(entry, str) else [entry]
    if not sources or not all(getattr(s, "repackable", False) for s in sources):
        return None
    return sources


class _Rewrite:
    """Replaces nodes one at a time, quantizing each weight (in each layout) once."""

    def __init__(
        self,
        graph: ir.Graph,
        block_size: int,
        symmetric: bool,
        accuracy_level: int,
        prequantized: Mapping[str, object],
    ):
        self.graph, self.block_size, self.symmetric = graph, block_size, symmetric
        self.accuracy_level, self.prequantized = accuracy_level, prequantized
        self._int4: dict[tuple, Int4Weight] = {}

    def _weight(self, weight: ir.Value, rows_first: bool, packed_rank: int = 3) -> Int4Weight:
        """The repacked GGUF blocks of ``weight`` where it has them, else its RTN blocks."""
        key = (weight, rows_first)
        if key not in self._int4:
            self._int4[key] = self._repacked(weight, rows_first, packed_rank) or self._rtn(
                weight, rows_first, packed_rank
            )
        return self._int4[key]

    def _rtn(self, weight: ir.Value, rows_first: bool, packed_rank: int) -> Int4Weight:
        return int4_weight(
            self.graph,
            weight,
            rows_first=rows_first,
            block_size=self.block_size,
            symmetric=self.symmetric,
            packed_rank=packed_rank,
        )

    def _sources(self, weight: ir.Value, rows_first: bool) -> list | None:
        """The GGUF weights whose stacked rows are ``weight``'s output features, if any.

        The checkpoint layout must be rows = output features: a transposed
        ``[K, N]`` parameter for a MatMul, the table itself for ``transB``/Gather.
        """
        if weight.name in self.prequantized:
            sources = _gguf_sources(self.prequantized[weight.name])
            if sources is None:
                return None
            if len(sources) == 1 and rows_first == isinstance(weight, TransposedParameter):
                return None
            return sources
        concat = weight.meta.get(CONCAT_OF)
        if concat is None or rows_first:
            return None
        parts, axis = concat
        if axis != 1 or not all(isinstance(p, TransposedParameter) for p in parts):
            return None
        sources = [_gguf_sources(self.prequantized.get(p.name)) for p in parts]
        if any(s is None or len(s) != 1 for s in sources):
            return None
        return [s[0] for s in sources]

    def _repacked(self, weight: ir.Value, rows_first: bool, packed_rank: int) -> Int4Weight | None:
        sources = self._sources(weight, rows_first)
        if sources is None:
            return None
        n, k = (int(d) for d in (weight.shape if rows_first else reversed(weight.shape)))
        types = {s.type_name for s in sources}
        bits = {REPACKED_BITS[t] for t in types}
        if (
            len(bits) != 1
            or sum(int(s.shape[0]) for s in sources) != n
            or any(int(s.shape[1]) != k for s in sources)
        ):
            return None  # mixed widths, or a layout the names did not promise: RTN
        return repacked_weight(
            self.graph,
            weight,
            sources,
            bits=bits.pop(),
            offsets=bool(types & HAS_OFFSETS),
            packed_rank=packed_rank,
        )

    def _replace(self, node: ir.Node, new_nodes: list[ir.Node]) -> None:
        ir.convenience.replace_nodes_and_values(
            self.graph, node, [node], new_nodes, node.outputs, new_nodes[-1].outputs
        )

    def _matmul_nbits(self, x, q: Int4Weight, bias, name: str) -> list[ir.Node]:
        """``MatMulNBits``, plus for Q4_1 blocks ``+ (x @ block_ones) @ offsets``."""
        inputs = [x, q.packed, q.scales, q.zero_points]
        if bias is not None:
            inputs += [None, bias]  # g_idx is unused
        while inputs[-1] is None:
            inputs.pop()
        attributes = {
            "K": q.k,
            "N": q.n,
            "bits": q.bits,
            "block_size": q.block_size,
            "accuracy_level": self.accuracy_level,
        }
        node = ir.node("MatMulNBits", inputs, attributes, domain=MS_DOMAIN, name=name)
        if q.offsets is None:
            return [node]
        # ONNX Runtime merges the identical block sums of weights sharing x (q/k/v,
        # gate/up); a float zero point would make its kernel dequantize every call.
        ones = block_ones(self.graph, q.k, q.offsets.dtype, q.block_size)
        sums = ir.node("MatMul", [x, ones], name=f"{name}/block_sums")
        shift = ir.node("MatMul", [sums.outputs[0], q.offsets], name=f"{name}/block_offsets")
        add = ir.node("Add", [node.outputs[0], shift.outputs[0]], name=f"{name}/add_offsets")
        return [node, sums, shift, add]

    def matmul(self, node: ir.Node) -> bool:
        """``MatMul(x, W [K, N])`` to ``MatMulNBits``; W may be shared only among MatMuls."""
        weight = node.inputs[1]
        if not _quantizable(weight):
            return False
        if any(n.op_type != "MatMul" or n.domain != "" or i != 1 for n, i in weight.uses()):
            return False
        q = self._weight(weight, rows_first=False)
        self._replace(node, self._matmul_nbits(node.inputs[0], q, None, node.name))
        return True

    def gemm(self, node: ir.Node) -> bool:
        """A head ``Gemm(x, W, b)`` (a plain ``x @ W(.T) + b``) to ``MatMulNBits``."""
        weight = node.inputs[1]
        bias = node.inputs[2] if len(node.inputs) > 2 else None
        attrs = node.attributes
        rows_first = attrs.get_int("transB", 0) == 1
        if (
            not _quantizable(weight)
            or attrs.get_int("transA", 0) != 0
            or attrs.get_float("alpha", 1.0) != 1.0
        ):
            return False
        n = int(weight.shape[0] if rows_first else weight.shape[1])
        if bias is not None and (
            attrs.get_float("beta", 1.0) != 1.0 or bias.shape is None or list(bias.shape) != [n]
        ):
            return False
        q = self._weight(weight, rows_first=rows_first)
        self._replace(node, self._matmul_nbits(node.inputs[0], q, bias, node.name))
        return True

    def gather(self, node: ir.Node) -> bool:
        """``Gather(table [vocab, hidden], ids)`` to ``GatherBlockQuantized`` (2-D, uint8, 4 or 8 bits)."""
        table, ids = node.inputs[0], node.inputs[1]
        q = self._weight(table, rows_first=True, packed_rank=2)
        if q.offsets is not None:  # Q4_1: GatherBlockQuantized has no additive term
            key = (table, True, "rtn")
            q = self._int4.setdefault(key, self._rtn(table, True, packed_rank=2))
        new_nodes = []
        data = q.packed
        if len(q.packed.shape) == 3:
            # MatMulNBits' B [vocab, blocks, block/2] holds the same bytes as the
            # [vocab, blocks*block/2] rows GatherBlockQuantized reads; ORT folds
            # this Reshape of an initializer when the session starts.
            shape = _constant([q.n, -1], f"{node.name}/packed_shape")
            reshape = ir.node("Reshape", [q.packed, shape.outputs[0]], name=f"{node.name}/packed")
            new_nodes += [shape, reshape]
            data = reshape.outputs[0]
        inputs = [data, ids, q.scales] + ([q.zero_points] if q.zero_points is not None else [])
        attributes = {
            "bits": q.bits,
            "block_size": q.block_size,
            "gather_axis": 0,
            "quantize_axis": 1,
        }
        new_nodes.append(
            ir.node("GatherBlockQuantized", inputs, attributes, domain=MS_DOMAIN, name=node.name)
        )
        if q.blocks * q.block_size != q.k:  # rows are padded to whole blocks
            starts, ends = (
                _constant([0], f"{node.name}/start"),
                _constant([q.k], f"{node.name}/end"),
            )
            axes = _constant([-1], f"{node.name}/axis")
            crop = ir.node(
                "Slice",
                [new_nodes[-1].outputs[0], starts.outputs[0], ends.outputs[0], axes.outputs[0]],
                name=f"{node.name}/crop",
            )
            new_nodes += [starts, ends, axes, crop]
        self._replace(node, new_nodes)
        return True

    def drop_unused_weights(self) -> None:
        """Remove the float weights that no node reads any more."""
        for weight, *_ in self._int4:
            if not weight.uses() and not weight.is_graph_output():
                self.graph.initializers.pop(weight.name, None)
