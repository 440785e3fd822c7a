"""The int4 graph pass: MatMul/Gemm to ``MatMulNBits``, token embeddings to ``GatherBlockQuantized``."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import groupby

import numpy as np
import onnx_ir as ir

from mobius.components._linear import TransposedParameter
from mobius.components._runtime import MS_DOMAIN
from mobius.passes._blocks import block_ones, block_weight, transposed
from mobius.passes._fusion import CONCAT_OF, head_nodes
from mobius.passes._int4 import BITS, BLOCK_SIZES, FLOAT_TYPES, ROUNDING_METHODS, Int4Weight
from mobius.passes._rounding import MIXES, Rounding
from mobius.weights._gguf_quant import KEPT_AS

logger = logging.getLogger("mobius")


def quantize_int4(
    model: ir.Model,
    *,
    block_size: int = 32,
    symmetric: bool = True,
    accuracy_level: int = 4,
    lm_head: bool = True,
    embeddings: bool = False,
    prequantized: Mapping[str, object] | None = None,
    rtn: bool = True,
    requantize: bool = False,
    bits: int = 4,
    method: str = "rtn",
    mix: str = "none",
) -> int:
    """Store the model's weights as 4-bit (or 8-bit) blocks for ONNX Runtime's contrib ops.

    - Each ``MatMul`` by a 2-D weight initializer becomes ``MatMulNBits``.
    - ``lm_head`` (default on): the output head too, the MatMul or tied ``Gemm``
      (``transB``, reading the embedding table) that makes ``logits``. Off keeps
      it float. A tied head is quantized from the table; the embedding ``Gather``
      keeps the float table unless ``embeddings`` is also on.
    - ``embeddings`` (default off): each token-embedding ``Gather`` (indices
      ``input_ids``) becomes ``GatherBlockQuantized``. A table tied to a
      quantized head is stored once: both ops read the same packed data, scales
      and zero points.

    ``prequantized`` maps initializer names to the GGUF weights they were applied
    from (items of a checkpoint whose weights are ``repackable`` and ``repack()``
    to :class:`~mobius.weights.RepackedWeight`, as mobius-text's GGUF checkpoint's
    are; other values are ignored). A weight stored in GGML blocks keeps them,
    whatever ``lm_head``, ``embeddings`` and ``block_size`` say (see
    :mod:`mobius.passes._blocks`): nothing is dequantized and re-rounded. A value
    may also be a list of GGUF weights whose rows, stacked, are the initializer's
    output features; an initializer whose ``meta[CONCAT_OF]`` is ``(values,
    axis)`` (packed q/k/v) is looked up that way by its parts' names, and parts of
    different block types become one op each, concatenated. ``rtn=False`` keeps
    every other weight float (a GGUF build's default); ``requantize=True``
    ignores the blocks and rounds the dequantized weights again (RTN), with a
    warning that names them.

    ``bits`` (4 or 8) is the width of the blocks made from float weights and
    ``method`` how each block's scale and zero point are chosen: ``"rtn"``
    (round-to-nearest from the block's extremes) or ``"hqq"`` (refit to lower
    the block's error; see :mod:`mobius.passes._hqq`). ``mix="sensitive"``
    keeps the weights 4 bits hurt most at 8 bits (see
    :mod:`mobius.passes._rounding`); packed q/k/v then become one op for q|k
    and one for v.

    Must run after the weights are applied; the weights are quantized (or
    repacked) lazily, one at a time, when the model is saved. Returns how many
    nodes were replaced.
    """
    if block_size not in BLOCK_SIZES:
        raise ValueError(f"block size must be one of {BLOCK_SIZES}, not {block_size}")
    if bits not in BITS or method not in ROUNDING_METHODS or mix not in MIXES:
        raise ValueError(
            f"bits, method and mix must be in {BITS}, {ROUNDING_METHODS} and {MIXES}; "
            f"got {bits}, {method!r}, {mix!r}"
        )
    graph = model.graph
    rewrite = _Rewrite(graph, block_size, symmetric, accuracy_level, prequantized or {})
    rewrite.rtn, rewrite.requantize = rtn, requantize
    heads = head_nodes(graph)
    rewrite.rounding = Rounding(
        graph, heads, block_size=block_size, symmetric=symmetric, bits=bits, method=method, mix=mix
    )
    count = 0
    for node in list(graph):
        if node.domain != "":
            continue
        head = node in heads
        if node.op_type == "MatMul":
            count += rewrite.matmul(node, float_ok=head and not lm_head)
        elif node.op_type == "Gemm" and head:
            count += rewrite.gemm(node, float_ok=not lm_head)
    # After the heads, so that a tied table's Gather finds the head's int4 data to share.
    for node in list(graph):
        if _is_token_embedding(node):
            count += rewrite.gather(node, float_ok=not embeddings)
    rewrite.finish()
    rewrite.rounding.log()
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

    rtn = True  # quantize weights that have no GGUF blocks (as ``rounding`` says)
    rounding: Rounding
    requantize = False  # ... and those that have them

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
        self._int4: dict[tuple, list[Int4Weight]] = {}
        self.prelude: list[ir.Node] = []  # nodes computing block scales, folded at load
        self.kept: Counter[str] = Counter()  # GGUF tensors kept in blocks, by type
        self.requantized: list[str] = []
        self._from_file: set[tuple] = set()  # keys of weights kept in their GGUF blocks

    def _weights(
        self, weight: ir.Value, rows_first: bool, float_ok: bool, packed_rank: int = 3
    ) -> list[Int4Weight] | None:
        """The int4 ops' inputs for ``weight``: its GGUF blocks (one entry per run of
        parts of the same block type) where it has them, else its RTN blocks, else
        None (it stays float)."""
        key = (weight, rows_first)  # a tied table's Gather reads the head's blocks
        if key not in self._int4:
            sources = self._sources(weight, rows_first)
            if sources is not None and self.requantize:
                self.requantized.append(weight.name)
                sources = None
            if sources is not None:
                self._int4[key] = self._kept(weight, sources, packed_rank)
                self._from_file.add(key)
            elif self.rtn and not float_ok:
                self._int4[key] = self.rounding.weights(weight, rows_first, packed_rank)
            else:
                return None
        elif float_ok and key not in self._from_file:
            return None  # RTN blocks made for another op; this one stays float
        return self._int4[key]

    def _kept(self, weight: ir.Value, sources: list, packed_rank: int) -> list[Int4Weight]:
        """One :func:`block_weight` per run of sources of the same block type."""
        runs = [list(run) for _, run in groupby(sources, key=lambda s: s.type_name)]
        base = _free_name(self.graph, weight.name, ".blocks")
        kept = []
        for i, run in enumerate(runs):
            name = base if len(runs) == 1 else _free_name(self.graph, f"{base}.part{i}", ".blocks")
            kept.append(
                block_weight(
                    self.graph, name, run, weight.dtype, self.prelude, packed_rank=packed_rank
                )
            )
            self.kept.update(s.type_name for s in run)
        return kept

    def _sources(self, weight: ir.Value, rows_first: bool) -> list | None:
        """The GGUF weights whose stacked rows are ``weight``'s output features, if any.

        The checkpoint layout must be rows = output features: a transposed
        ``[K, N]`` parameter for a MatMul, the table itself for ``transB``/Gather.
        """
        n, k = (int(d) for d in (weight.shape if rows_first else reversed(weight.shape)))
        if weight.name in self.prequantized:
            sources = _gguf_sources(self.prequantized[weight.name])
            if sources is None:
                return None
            if len(sources) == 1 and rows_first == isinstance(weight, TransposedParameter):
                return None
        else:
            concat = weight.meta.get(CONCAT_OF)
            if concat is None or rows_first:
                return None
            parts, axis = concat
            if axis != 1 or not all(isinstance(p, TransposedParameter) for p in parts):
                return None
            found = [_gguf_sources(self.prequantized.get(p.name)) for p in parts]
            if any(s is None or len(s) != 1 for s in found):
                return None
            sources = [s[0] for s in found]
        if sum(int(s.shape[0]) for s in sources) != n or any(int(s.shape[1]) != k for s in sources):
            return None  # a layout the names did not promise: treat as float
        return sources

    def _replace(self, node: ir.Node, new_nodes: list[ir.Node]) -> None:
        ir.convenience.replace_nodes_and_values(
            self.graph, node, [node], new_nodes, node.outputs, new_nodes[-1].outputs
        )

    def _matmul_nbits(self, x, q: Int4Weight, bias, name: str) -> list[ir.Node]:
        """``MatMulNBits``, plus for blocks with offsets ``+ (x @ block_ones) @ offsets``."""
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
        if q.row_offsets is None:
            return [node]
        if q.offsets is None:
            q.offsets = transposed(q.row_offsets, self.prelude)
        # ONNX Runtime merges the identical block sums of weights sharing x (q/k/v,
        # gate/up); a float zero point would make its kernel dequantize every call.
        ones = block_ones(q.k, q.block_size, q.offsets.dtype, self.prelude)
        sums = ir.node("MatMul", [x, ones], name=f"{name}/block_sums")
        shift = ir.node("MatMul", [sums.outputs[0], q.offsets], name=f"{name}/block_offsets")
        add = ir.node("Add", [node.outputs[0], shift.outputs[0]], name=f"{name}/add_offsets")
        return [node, sums, shift, add]

    def _linear(self, x, parts: list[Int4Weight], bias, name: str) -> list[ir.Node]:
        """``x @ W (+ bias)`` for W in one or more row runs (outputs concatenated)."""
        if len(parts) == 1:
            return self._matmul_nbits(x, parts[0], bias, name)
        nodes, outputs = [], []
        for i, part in enumerate(parts):
            nodes += self._matmul_nbits(x, part, None, f"{name}/part{i}")
            outputs.append(nodes[-1].outputs[0])
        nodes.append(ir.node("Concat", outputs, {"axis": -1}, name=f"{name}/concat"))
        if bias is not None:
            nodes.append(ir.node("Add", [nodes[-1].outputs[0], bias], name=f"{name}/bias"))
        return nodes

    def matmul(self, node: ir.Node, float_ok: bool = False) -> bool:
        """``MatMul(x, W [K, N])`` to ``MatMulNBits``; W may be shared only among MatMuls."""
        weight = node.inputs[1]
        if not _quantizable(weight):
            return False
        if any(n.op_type != "MatMul" or n.domain != "" or i != 1 for n, i in weight.uses()):
            return False
        parts = self._weights(weight, rows_first=False, float_ok=float_ok)
        if parts is None:
            return False
        self._replace(node, self._linear(node.inputs[0], parts, None, node.name))
        return True

    def gemm(self, node: ir.Node, float_ok: bool = False) -> bool:
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
        parts = self._weights(weight, rows_first=rows_first, float_ok=float_ok)
        if parts is None:
            return False
        self._replace(node, self._linear(node.inputs[0], parts, bias, node.name))
        return True

    def gather(self, node: ir.Node, float_ok: bool = False) -> bool:
        """``Gather(table [vocab, hidden], ids)`` to ``GatherBlockQuantized`` (2-D, uint8, 4 or 8 bits).

        Blocks with offsets (Q4_1, Q4_K...) add their row's offsets, gathered too.
        """
        table, ids = node.inputs[0], node.inputs[1]
        parts = self._weights(table, rows_first=True, float_ok=float_ok, packed_rank=2)
        if parts is None:
            return False
        (q,) = parts
        new_nodes = []
        data = q.packed
        if len(q.packed.shape) == 3:
            # MatMulNBits' B [vocab, blocks, block*bits/8] holds the same bytes as the
            # [vocab, blocks*block*bits/8] rows GatherBlockQuantized reads; ORT folds
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
        gathered = ir.node(
            "GatherBlockQuantized", inputs, attributes, domain=MS_DOMAIN, name=node.name
        )
        new_nodes.append(gathered)
        if q.row_offsets is not None:
            new_nodes += self._add_row_offsets(gathered.outputs[0], ids, q, node.name)
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

    def _add_row_offsets(self, rows: ir.Value, ids: ir.Value, q: Int4Weight, name: str):
        """``rows [..., K] + offsets[ids]``, each block's offset added to its values."""
        lead = [0] * len(ids.shape)  # Reshape copies these dims (ids' rank is known)
        offsets = ir.node("Gather", [q.row_offsets, ids], {"axis": 0}, name=f"{name}/offsets")
        axis = _constant([-1], f"{name}/offsets_axis")
        column = ir.node(
            "Unsqueeze", [offsets.outputs[0], axis.outputs[0]], name=f"{name}/offsets_column"
        )
        blocked = _constant([*lead, q.blocks, q.block_size], f"{name}/blocked_shape")
        split = ir.node("Reshape", [rows, blocked.outputs[0]], name=f"{name}/blocked")
        add = ir.node("Add", [split.outputs[0], column.outputs[0]], name=f"{name}/add_offsets")
        flat = _constant([*lead, q.blocks * q.block_size], f"{name}/flat_shape")
        out = ir.node("Reshape", [add.outputs[0], flat.outputs[0]], name=f"{name}/rows")
        return [offsets, axis, column, blocked, split, add, flat, out]

    def finish(self) -> None:
        """Put the folded nodes first, drop the float weights no node reads, log what was kept."""
        if self.prelude:
            first = next(iter(self.graph), None)
            if first is None:
                self.graph.extend(self.prelude)
            else:
                self.graph.insert_before(first, self.prelude)
        for weight, *_ in self._int4:
            if not weight.uses() and not weight.is_graph_output():
                self.graph.initializers.pop(weight.name, None)
        for type_name, count in sorted(self.kept.items()):
            logger.info("%s: %d tensors kept: %s", type_name, count, KEPT_AS[type_name])
        if self.requantized:
            shown = ", ".join(self.requantized[:6])
            more = len(self.requantized) - 6
            logger.warning(
                "--requantize: %d weights stored as quantized blocks were dequantized and "
                "rounded again, so the model is no longer the file's: %s%s",
                len(self.requantized),
                shown,
                f" and {more} more" if more > 0 else "",
            )


def _free_name(graph: ir.Graph, base: str, marker: str) -> str:
    """``base``, or ``base.1``, ... when a weight is kept in two layouts."""
    name, i = base, 0
    while f"{name}{marker}" in graph.initializers:
        i += 1
        name = f"{base}.{i}"
    return name
