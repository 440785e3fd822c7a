"""Rewrites of a built graph into ONNX Runtime's fused contrib ops (``--ep cpu|cuda``)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from mobius.components._runtime import MS_DOMAIN

# ``Value.meta`` key of an initializer that concatenates others lazily (packed
# q/k/v): ``(values, axis)``, so the int4 pass can stack the parts' GGUF blocks.
CONCAT_OF = "mobius.concat_of"
#: ``value.meta`` key of values computed from initializers alone (ONNX Runtime folds them).
FOLDED = "mobius.folded"

# Normalisation op → (fused op with the residual add, inputs taken from the norm after x).
_SKIP_NORMS = {
    "RMSNormalization": ("SkipSimplifiedLayerNormalization", 1),
    "LayerNormalization": ("SkipLayerNormalization", 2),
}

# Ops that may sit between the head's MatMul/Gemm and ``logits``: reshapes, a
# bias, a final softcap (``tanh(x / c) * c``), a cast.
_HEAD_PASS_THROUGH = frozenset(
    {"Reshape", "Identity", "Add", "Mul", "Div", "Tanh", "Cast", "Squeeze", "Unsqueeze"}
)


def head_nodes(graph: ir.Graph) -> set[ir.Node]:
    """The MatMul/Gemm nodes whose output becomes the ``logits`` output."""
    heads = set()
    for output in graph.outputs:
        if output.name != "logits":
            continue
        node = output.producer()
        while node is not None and node.domain == "":
            if node.op_type in ("MatMul", "Gemm"):
                heads.add(node)
                break
            if node.op_type not in _HEAD_PASS_THROUGH or not node.inputs or not node.inputs[0]:
                break
            node = node.inputs[0].producer()
    return heads


def _computed(value: ir.Value | None) -> bool:
    """A value made by a node at run time (not a constant, an initializer or a graph input)."""
    if value is None or value.is_initializer() or value.meta.get(FOLDED):
        return False
    producer = value.producer()
    return producer is not None and producer.op_type != "Constant"


def _reads(value: ir.Value | None, source: ir.Value) -> bool:
    """Whether ``value`` is made by a node that takes ``source`` as an input."""
    producer = value.producer() if value is not None else None
    return producer is not None and source in producer.inputs


def _last_axis(norm: ir.Node) -> bool:
    """A norm over the last axis of a tensor the fused ops take: they refuse any rank but 2
    or 3 at run time (a per-head q/k norm over ``[batch, heads, sequence, head_dim]``).
    Most built values carry no shape, so an unknown rank is taken as hidden states; a
    model that norms a 4-D sum keeps it from being an ``Add`` (see hunyuan_vl_text)."""
    axis = norm.attributes.get_int("axis", -1)
    rank = None if norm.inputs[0].shape is None else len(norm.inputs[0].shape)
    if rank is not None and rank not in (2, 3):
        return False
    return axis == -1 or (rank is not None and axis == rank - 1)


def fuse_skip_norms(model: ir.Model, norms: tuple[str, ...] = tuple(_SKIP_NORMS)) -> int:
    """Fold ``norm(a + b)`` into ``Skip(Simplified)LayerNormalization(a, b)``.

    The residual sum stays available: the fused op's fourth output replaces the
    ``Add`` for its other consumers. Only last-axis norms of two computed
    tensors are fused (the op wants hidden states, not a broadcast constant),
    and only the norm op types in ``norms``. Returns how many norms were fused.
    """
    graph = model.graph
    count = 0
    for norm in list(graph):
        if norm.domain != "" or norm.op_type not in norms or not _last_axis(norm):
            continue
        add = norm.inputs[0].producer()
        if add is None or add.op_type != "Add" or add.domain != "" or len(add.inputs) != 2:
            continue
        a, b = add.inputs
        if not (_computed(a) and _computed(b)) or add.outputs[0].is_graph_output():
            continue
        fused_type, params = _SKIP_NORMS[norm.op_type]
        if any(_reads(value, add.outputs[0]) for value in norm.inputs[1 : 1 + params]):
            continue  # a weight computed from the sum itself (CastLike(ones, x)): no fusion
        fused = ir.node(
            fused_type,
            inputs=[a, b, *norm.inputs[1 : 1 + params]],
            attributes={"epsilon": norm.attributes.get_float("epsilon", 1e-5)},
            domain=MS_DOMAIN,
            num_outputs=4,
            name=f"{norm.name or 'norm'}_skip",
        )
        graph.insert_before(add, fused)
        output = norm.outputs[0]
        if output.is_graph_output():  # an encoder's last norm is last_hidden_state: keep the name
            name, output.name = output.name, None
            ir.convenience.replace_all_uses_with(
                output, fused.outputs[0], replace_graph_outputs=True
            )
            fused.outputs[0].name = name
        else:
            ir.convenience.replace_all_uses_with(output, fused.outputs[0])
        ir.convenience.replace_all_uses_with(add.outputs[0], fused.outputs[3])
        fused.outputs[0].type, fused.outputs[3].type = norm.outputs[0].type, add.outputs[0].type
        for unused in fused.outputs[1:3]:  # mean, inv_std_var: omitted, so never computed
            unused.name = ""
        graph.remove([norm, add], safe=True)
        count += 1
    if count:
        graph.opset_imports[MS_DOMAIN] = 1
        graph.sort()
    return count


def _keeps_tokens(node: ir.Node) -> bool:
    """A Reshape that keeps batch and sequence (``[0, 0, ...]``): a head split or merge."""
    shape = node.inputs[1].const_value if len(node.inputs) > 1 and node.inputs[1] else None
    if shape is None:
        producer = node.inputs[1].producer() if node.inputs[1] is not None else None
        attr = producer.attributes.get("value") if producer is not None else None
        shape = attr.value if attr is not None and producer.op_type == "Constant" else None
    return shape is not None and list(shape.numpy()[:2]) == [0, 0]


def _projection(value: ir.Value):
    """``(x, weight, bias)`` when ``value`` is ``x @ weight (+ bias)`` seen through head reshapes."""
    node = value.producer()
    while node is not None and node.op_type == "Reshape" and _keeps_tokens(node):
        node = node.inputs[0].producer()
    bias = None
    if node is not None and node.op_type == "Add" and node.inputs[1].is_initializer():
        bias, node = node.inputs[1], node.inputs[0].producer()
    if node is None or node.op_type != "MatMul" or node.domain != "":
        return None
    weight = node.inputs[1]
    if not weight.is_initializer() or weight.const_value is None or len(weight.uses()) != 1:
        return None
    return node.inputs[0], weight, bias


def _concat_initializer(
    graph: ir.Graph, values: list[ir.Value], axis: int, name: str | None = None
) -> ir.Value:
    """An initializer that concatenates ``values`` lazily, when the model is written."""
    shapes = [list(v.shape) for v in values]
    shape = list(shapes[0])
    shape[axis] = sum(s[axis] for s in shapes)
    name = name or values[0].name.replace("q_proj", "qkv_proj") + ".packed"

    def load() -> ir.Tensor:
        arrays = [v.const_value.numpy() for v in values]
        return ir.tensor(np.concatenate(arrays, axis=axis), name=name)

    tensor = ir.LazyTensor(load, values[0].dtype, ir.Shape(shape), name=name)
    value = ir.Value(name=name, type=values[0].type, shape=ir.Shape(shape), const_value=tensor)
    # The int4 pass reads the parts to pack each one's own blocks (GGUF passthrough).
    value.meta[CONCAT_OF] = (values, axis)
    graph.register_initializer(value)
    return value


def pack_qkv(model: ir.Model) -> int:
    """Feed each ``GroupQueryAttention`` one packed ``x @ [Wq | Wk | Wv]`` instead of three MatMuls.

    Applies when query, key and value are plain projections of the same input
    (no per-head norm or rotation outside the kernel); must run after the
    weights are applied. Returns how many attention nodes were packed.
    """
    graph = model.graph
    count = 0
    for node in list(graph):
        if node.op_type != "GroupQueryAttention" or len(node.inputs) < 3 or node.inputs[1] is None:
            continue
        projections = [_projection(v) for v in node.inputs[:3]]
        if any(p is None for p in projections) or len({id(p[0]) for p in projections}) != 1:
            continue
        biases = [p[2] for p in projections]
        if any(b is None for b in biases) and not all(b is None for b in biases):
            # Whisper's lineage: no key bias. Zeros in its place keep the sum exact.
            biases = [_zero_bias(p[1], biases) if p[2] is None else p[2] for p in projections]
        x = projections[0][0]
        weight = _concat_initializer(graph, [p[1] for p in projections], axis=1)
        matmul = ir.node("MatMul", [x, weight], name=f"{node.name}_packed_qkv")
        new_nodes, packed = [matmul], matmul.outputs[0]
        if biases[0] is not None:
            add = ir.node("Add", [packed, _concat_initializer(graph, biases, axis=0)])
            new_nodes.append(add)
            packed = add.outputs[0]
        graph.insert_before(node, new_nodes)
        node.replace_input_with(0, packed)
        node.replace_input_with(1, None)
        node.replace_input_with(2, None)
        count += 1
    if count:
        RemoveUnusedNodesPass()(model)
    return count


def _zero_bias(weight: ir.Value, biases: list[ir.Value | None]) -> ir.Value:
    """A zero bias for ``weight``'s outputs ``[N]``, of the type of the given ``biases``."""
    like = next(b for b in biases if b is not None).const_value.numpy()
    zeros = np.zeros(weight.shape[1], dtype=like.dtype)
    name = weight.name.removesuffix(".weight") + ".zero_bias"
    return ir.Value(name=name, type=ir.TensorType(ir.DataType.from_numpy(like.dtype)),
                    shape=ir.Shape(zeros.shape), const_value=ir.tensor(zeros, name=name))  # fmt: skip


def _packable_weight(value: ir.Value) -> bool:
    """A loaded 2-D initializer that one MatMul alone reads (not an input's default: a LoRA
    input's is replaced at run time)."""
    return (
        value.is_initializer()
        and not value.is_graph_input()
        and value.const_value is not None
        and value.shape is not None
        and len(value.shape) == 2
        and len(value.uses()) == 1
    )


def _packed_name(values: list[ir.Value]) -> str:
    """``a.b.gate_proj.weight`` + ``a.b.up_proj.weight`` → ``a.b.gate_proj+up_proj.packed``."""
    names = [v.name.removesuffix(".weight") for v in values]
    prefix = names[0][: names[0].rfind(".") + 1]
    if not all(n.startswith(prefix) for n in names):
        prefix = ""
    return prefix + "+".join(n[len(prefix) :] for n in names) + ".packed"


def pack_parallel_matmuls(model: ir.Model) -> int:
    """Replace MatMuls that read the same input with one MatMul over their concatenated weights.

    ``x @ W1``, ``x @ W2``... become ``Split(x @ [W1 | W2 | ...])``: one larger
    kernel instead of several small ones, as a gated MLP's gate and up
    projections are (measured on SmolLM2 int4 decode in onnxruntime-genai: about
    4% faster). The result is exact: each output column still reads its own
    weights. Output heads are left alone, so the int4 pass can still find them.
    Must run after the weights are applied. Returns how many MatMuls were merged away.
    """
    graph = model.graph
    heads = head_nodes(graph)
    groups: dict[int, list[ir.Node]] = {}
    for node in graph:
        if (
            node.op_type == "MatMul"
            and node.domain == ""
            and node not in heads
            and _packable_weight(node.inputs[1])
        ):
            groups.setdefault(id(node.inputs[0]), []).append(node)
    count = 0
    for nodes in groups.values():
        weights = [n.inputs[1] for n in nodes]
        if len(nodes) < 2 or len({(w.dtype, w.shape[0]) for w in weights}) != 1:
            continue
        packed = _concat_initializer(graph, weights, axis=1, name=_packed_name(weights))
        matmul = ir.node("MatMul", [nodes[0].inputs[0], packed], name=f"{nodes[0].name}_packed")
        # A Constant node, not an initializer: saved as external data (many parts), ORT
        # could not read the sizes when it infers the Split's shapes.
        sizes = ir.node(
            "Constant",
            [],
            attributes={"value": ir.tensor(np.array([int(w.shape[1]) for w in weights], np.int64))},
            name=f"{packed.name}.split",
        )
        split = ir.node(
            "Split",
            [matmul.outputs[0], sizes.outputs[0]],
            attributes={"axis": -1},
            num_outputs=len(nodes),
            name=f"{nodes[0].name}_split",
        )
        graph.insert_before(nodes[0], [matmul, sizes, split])
        for old, new in zip(nodes, split.outputs, strict=True):
            new.type, new.shape = old.outputs[0].type, old.outputs[0].shape
            ir.convenience.replace_all_uses_with(old.outputs[0], new)
        graph.remove(nodes, safe=True)
        for weight in weights:  # read only by the packed initializer now
            graph.initializers.pop(weight.name)
        count += len(nodes) - 1
    return count


# Ops that act on the last axis alone (weights and biases constant): a [batch, seq, k]
# input works as well as its [batch*seq, k] flattening.
_LAST_AXIS_OPS = {("", "MatMul"), ("", "Add"), ("", "Mul"), (MS_DOMAIN, "MatMulNBits")}


def unflatten_head(model: ir.Model) -> bool:
    """Drop the ``Reshape`` pair around an output head whose ops take 3-D input as well.

    A tied head is ``Gemm`` (2-D only) between ``Reshape(x, [-1, hidden])`` and a
    reshape back to ``[batch, seq, vocab]``; once quantized to ``MatMulNBits``
    (plus, for Q4_1 blocks, a MatMul for the offsets) the reshapes only cost two
    ops per token. Returns whether they were removed.
    """
    graph = model.graph
    logits = next((v for v in graph.outputs if v.name == "logits"), None)
    back = logits.producer() if logits is not None else None
    if back is None or back.op_type != "Reshape" or back.domain != "":
        return False
    # Walk from the reshape back up every path to a flattening Reshape.
    flatten, seen, todo = None, set(), [back.inputs[0]]
    while todo:
        node = todo.pop().producer()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if node.op_type == "Reshape" and _constant_ints(node.inputs[1]) is not None:
            shape = _constant_ints(node.inputs[1])
            if len(shape) != 2 or shape[0] != -1 or flatten not in (None, node):
                return False
            flatten = node
            continue
        if (node.domain, node.op_type) not in _LAST_AXIS_OPS:
            return False
        todo.extend(v for v in node.inputs if _computed(v))  # weights and biases stop the walk
    if flatten is None or not _leading_axes_of(back.inputs[1], flatten.inputs[0]):
        return False
    inside = {id(u) for u, _ in flatten.outputs[0].uses()}
    if not inside <= seen:
        return False  # the flat tensor also feeds something outside the head
    ir.convenience.replace_all_uses_with(flatten.outputs[0], flatten.inputs[0])
    result = back.inputs[0]
    result.type, result.shape = logits.type, logits.shape
    index = graph.outputs.index(logits)
    back.outputs[0].name, result.name = None, "logits"
    graph.outputs[index] = result
    RemoveUnusedNodesPass()(model)
    return True


def _leading_axes_of(shape: ir.Value | None, x: ir.Value) -> bool:
    """Whether ``shape`` is ``Concat(Shape(x)[:-1], [n])``: ``x``'s leading axes, a new last one."""
    concat = shape.producer() if shape is not None else None
    if concat is None or concat.op_type != "Concat" or len(concat.inputs) != 2:
        return False
    sliced = concat.inputs[0].producer()
    if sliced is None or sliced.op_type != "Slice" or len(sliced.inputs) < 3:
        return False
    source = sliced.inputs[0].producer()
    last = _constant_ints(concat.inputs[1])
    return (
        source is not None
        and source.op_type == "Shape"
        and source.inputs[0] is x
        and not source.attributes
        and _constant_ints(sliced.inputs[1]) == [0]
        and _constant_ints(sliced.inputs[2]) == [-1]
        and last is not None
        and len(last) == 1
    )


def _constant_ints(value: ir.Value | None) -> list[int] | None:
    """The integers of a constant or initializer value (a Reshape's shape), else None."""
    if value is None:
        return None
    tensor = value.const_value
    producer = value.producer()
    if tensor is None and producer is not None and producer.op_type == "Constant":
        attr = producer.attributes.get("value")
        tensor = attr.value if attr is not None else None
        if tensor is None and "value_ints" in producer.attributes:
            return list(producer.attributes.get_ints("value_ints"))
    return None if tensor is None else [int(v) for v in tensor.numpy().reshape(-1)]


def _only_producer(value: ir.Value, op_type: str) -> ir.Node | None:
    node = value.producer()
    ok = node is not None and node.op_type == op_type and node.domain == ""
    return node if ok and len(value.uses()) == 1 else None


def _is_rank3_identity(reshape: ir.Node) -> bool:
    """``Reshape(x, [0, 0, -1])`` of an attention kernel's ``[batch, seq, hidden]`` output."""
    producer = reshape.inputs[0].producer()
    rank3 = producer is not None and (producer.op_type, producer.domain) == (
        "GroupQueryAttention",
        MS_DOMAIN,
    )
    out = reshape.outputs[0]
    return rank3 and _constant_ints(reshape.inputs[1]) == [0, 0, -1] and not out.is_graph_output()


def simplify_layout_ops(model: ir.Model) -> int:
    """Drop inverse Transpose pairs and fold Reshape chains left by head splits and merges.

    ``Transpose(Transpose(x, p), q)`` with ``q`` undoing ``p`` is ``x``;
    ``Reshape(Reshape(x, a), b)`` is one Reshape of ``x`` when every ``0`` (copy a
    dimension) in ``b`` points at a dimension ``a`` copied or fixed. Returns the
    number of nodes bypassed.
    """
    graph = model.graph
    count = 0
    for node in list(graph):
        if node.domain != "" or node.op_type not in ("Transpose", "Reshape"):
            continue
        if node.op_type == "Reshape" and _is_rank3_identity(node):
            ir.convenience.replace_all_uses_with(node.outputs[0], node.inputs[0])
            count += 1
            continue
        inner = _only_producer(node.inputs[0], node.op_type)
        if inner is None:
            continue
        if node.op_type == "Transpose":
            outer_perm = node.attributes.get_ints("perm", None)
            inner_perm = inner.attributes.get_ints("perm", None)
            if outer_perm is None or inner_perm is None:
                continue
            if [inner_perm[i] for i in outer_perm] != list(range(len(outer_perm))):
                continue
            if node.outputs[0].is_graph_output():  # the name is the contract: keep it
                continue
            ir.convenience.replace_all_uses_with(node.outputs[0], inner.inputs[0])
        else:
            first, second = _constant_ints(inner.inputs[1]), _constant_ints(node.inputs[1])
            if first is None or second is None or inner.attributes.get_int("allowzero", 0):
                continue
            merged = []
            for i, dim in enumerate(second):
                if dim == 0:  # copies the inner result's dimension i
                    if i >= len(first) or first[i] == -1:
                        merged = None
                        break
                    dim = first[i]
                merged.append(dim)
            if merged is None:
                continue
            shape = ir.Value(name=f"{node.name}_shape", const_value=ir.tensor(merged))
            shape.type, shape.shape = ir.TensorType(ir.DataType.INT64), ir.Shape([len(merged)])
            graph.register_initializer(shape)
            node.replace_input_with(0, inner.inputs[0])
            node.replace_input_with(1, shape)
        count += 1
    if count:
        RemoveUnusedNodesPass()(model)
    return count


def _has_kv_cache(graph: ir.Graph) -> bool:
    """A graph that takes a key/value cache (a decoder, run one token per step)."""
    return any(v.name and v.name.startswith("past_key_values") for v in graph.inputs)


def fuse_for_runtime(model: ir.Model, ep: str) -> None:
    """The passes of an ``--ep cpu|cuda`` build (``ep``), after the graph is made.

    On ``cpu``, a graph without a key/value cache (an encoder: many tokens per
    run) keeps ``LayerNormalization(a + b)`` as it is: ONNX Runtime 1.32's CPU
    ``SkipLayerNormalization`` kernel is slower than the ``Add`` and
    ``LayerNormalization`` it replaces (hidden 384, 128 and 4096 rows: 0.22 vs
    0.04 ms and 15 vs 3 ms on one thread; all-MiniLM-L6-v2 runs about 10%
    faster unfused, see benchmarks/encoder_compare.py).
    """
    norms = tuple(_SKIP_NORMS)
    if ep == "cpu" and not _has_kv_cache(model.graph):
        norms = tuple(n for n in norms if n != "LayerNormalization")
    fuse_skip_norms(model, norms)
    RemoveUnusedNodesPass()(model)
    while simplify_layout_ops(model):  # each round exposes the next pair (T·T, then R·R)
        pass
