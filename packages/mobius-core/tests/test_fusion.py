"""Graph passes of ``--ep cpu|cuda`` builds on small hand-made graphs (no torch)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import onnxruntime as ort

from mobius.components._runtime import MS_DOMAIN
from mobius.passes import quantize_int4
from mobius.passes._fusion import CONCAT_OF, pack_parallel_matmuls

rng = np.random.default_rng(0)
K = 32


def _initializer(graph: ir.Graph, name: str, array: np.ndarray) -> ir.Value:
    array = array.astype(np.float32)
    value = ir.Value(name=name, const_value=ir.tensor(array, name=name))
    value.type, value.shape = ir.TensorType(ir.DataType.FLOAT), ir.Shape(array.shape)
    graph.register_initializer(value)
    return value


def _three_projections() -> tuple[ir.Model, dict[str, np.ndarray]]:
    """``gate = x @ Wg``, ``up = x @ Wu`` (siblings), ``logits = (gate * up) @ Wh`` (a head)."""
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 3, K]))
    graph = ir.Graph([x], [], nodes=[], opset_imports={"": 23}, name="g")
    rng = np.random.default_rng(1)  # the same weights on every call
    weights = {
        "mlp.gate_proj.weight": rng.standard_normal((K, 48)).astype(np.float32),
        "mlp.up_proj.weight": rng.standard_normal((K, 48)).astype(np.float32),
        "lm_head.weight": rng.standard_normal((48, 40)).astype(np.float32),
    }
    values = {name: _initializer(graph, name, array) for name, array in weights.items()}
    gate = ir.node("MatMul", [x, values["mlp.gate_proj.weight"]], name="gate")
    up = ir.node("MatMul", [x, values["mlp.up_proj.weight"]], name="up")
    product = ir.node("Mul", [gate.outputs[0], up.outputs[0]])
    head = ir.node("MatMul", [product.outputs[0], values["lm_head.weight"]], name="head")
    head.outputs[0].name = "logits"
    graph.extend([gate, up, product, head])
    graph.outputs.append(head.outputs[0])
    return ir.Model(graph, ir_version=10), weights


def _run(model: ir.Model, x: np.ndarray) -> np.ndarray:
    proto = ir.serde.serialize_model(model)
    return ort.InferenceSession(proto.SerializeToString()).run(None, {"x": x})[0]


def test_sibling_matmuls_become_one_matmul_and_a_split():
    model, weights = _three_projections()
    x = rng.standard_normal((2, 3, K)).astype(np.float32)
    expected = _run(model, x)

    assert pack_parallel_matmuls(model) == 1
    ops = [node.op_type for node in model.graph]
    assert ops.count("MatMul") == 2 and ops.count("Split") == 1  # packed + the head
    assert set(model.graph.initializers) >= {"mlp.gate_proj+up_proj.packed", "lm_head.weight"}
    assert "mlp.gate_proj.weight" not in model.graph.initializers  # not saved twice
    packed = model.graph.initializers["mlp.gate_proj+up_proj.packed"]
    assert [v.name for v in packed.meta[CONCAT_OF][0]] == list(weights)[:2]
    np.testing.assert_array_equal(_run(model, x), expected)  # the same sums, exactly


def test_packed_weights_quantize_as_one_matmul_nbits():
    (model, _), (unpacked, _) = _three_projections(), _three_projections()
    x = rng.standard_normal((2, 3, K)).astype(np.float32)
    quantize_int4(unpacked, accuracy_level=0)
    pack_parallel_matmuls(model)
    quantize_int4(model, accuracy_level=0)
    nbits = [node for node in model.graph if node.op_type == "MatMulNBits"]
    assert sorted(node.attributes.get_int("N") for node in nbits) == [40, 96]
    # Blocks run along K per output column: packing changes no quantized value.
    np.testing.assert_array_equal(_run(model, x), _run(unpacked, x))


def test_matmuls_of_different_inputs_or_shared_weights_stay():
    model, _ = _three_projections()
    graph = model.graph
    gate = next(node for node in graph if node.name == "gate")
    extra = ir.node("MatMul", [graph.inputs[0], gate.inputs[1]], name="shares_the_gate_weight")
    graph.insert_after(gate, extra)
    graph.outputs.append(extra.outputs[0])
    assert pack_parallel_matmuls(model) == 0


def test_inverse_transposes_fold_but_a_graph_output_keeps_its_name():
    """``Transpose(Transpose(x))`` is ``x`` inside a graph; as the graph's output it stays."""
    from mobius.passes._fusion import simplify_layout_ops

    def model(as_output: bool) -> ir.Model:
        x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 3, 4]))
        graph = ir.Graph([x], [], nodes=[], opset_imports={"": 23}, name="g")
        first = ir.node("Transpose", [x], attributes={"perm": [0, 2, 1]})
        second = ir.node("Transpose", [first.outputs[0]], attributes={"perm": [0, 2, 1]})
        graph.extend([first, second])
        if as_output:
            second.outputs[0].name = "y"
            graph.outputs.append(second.outputs[0])
        else:
            relu = ir.node("Relu", [second.outputs[0]])
            relu.outputs[0].name = "y"
            graph.append(relu)
            graph.outputs.append(relu.outputs[0])
        return ir.Model(graph, ir_version=10)

    inner = model(as_output=False)
    assert simplify_layout_ops(inner) == 1
    relu = next(n for n in inner.graph if n.op_type == "Relu")
    assert relu.inputs[0].name == "x"
    assert simplify_layout_ops(model(as_output=True)) == 0


def _attention_without_key_bias() -> ir.Model:
    """``GroupQueryAttention(x @ Wq + bq, x @ Wk, x @ Wv + bv)`` over an empty cache (Whisper's
    decoder: no key bias); the cache lengths are graph inputs."""
    heads, head_dim = 2, 16
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([1, 3, K]))
    past = [
        ir.Value(
            name=n, type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([1, heads, 0, head_dim])
        )
        for n in ("past_key", "past_value")
    ]
    lengths = [
        ir.Value(name=n, type=ir.TensorType(ir.DataType.INT32), shape=ir.Shape(s))
        for n, s in (("seqlens_k", [1]), ("total_sequence_length", []))
    ]
    graph = ir.Graph([x, *past, *lengths], [], nodes=[], opset_imports={"": 23, MS_DOMAIN: 1})
    width = heads * head_dim
    projections = []
    for name, biased in (("q_proj", True), ("k_proj", False), ("v_proj", True)):
        weight = _initializer(graph, f"attn.{name}.weight", rng.standard_normal((K, width)))
        node = ir.node("MatMul", [x, weight])
        graph.append(node)
        if biased:
            bias = _initializer(graph, f"attn.{name}.bias", rng.standard_normal(width))
            node = ir.node("Add", [node.outputs[0], bias])
            graph.append(node)
        projections.append(node.outputs[0])
    attention = ir.node(
        "GroupQueryAttention", [*projections, *past, *lengths], domain=MS_DOMAIN, num_outputs=3,
        attributes={"num_heads": heads, "kv_num_heads": heads},
    )  # fmt: skip
    graph.append(attention)
    attention.outputs[0].name = "y"
    graph.outputs.append(attention.outputs[0])
    return ir.Model(graph, ir_version=10)


def test_qkv_without_a_key_bias_pack_with_zeros_exactly():
    from mobius.passes._fusion import pack_qkv

    model = _attention_without_key_bias()
    feeds = {
        "x": rng.standard_normal((1, 3, K)).astype(np.float32),
        "past_key": np.zeros((1, 2, 0, 16), np.float32),
        "past_value": np.zeros((1, 2, 0, 16), np.float32),
        "seqlens_k": np.array([2], np.int32),
        "total_sequence_length": np.array(3, np.int32),
    }

    def run() -> np.ndarray:
        proto = ir.serde.serialize_model(model).SerializeToString()
        return ort.InferenceSession(proto).run(["y"], feeds)[0]

    expected = run()
    assert pack_qkv(model) == 1
    ops = [node.op_type for node in model.graph]
    assert ops.count("MatMul") == 1 and ops.count("Add") == 1  # one packed projection and bias
    np.testing.assert_array_equal(run(), expected)
