"""Run GGUF blocks through the real int4 pass on a two-op graph (``x @ W``, ``table[ids]``)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from mobius.components._linear import TransposedParameter


def run_kept_blocks(
    *,
    matmul=None,
    x: np.ndarray | None = None,
    table=None,
    ids: np.ndarray | None = None,
    accuracy_level: int = 0,
    requantize: bool = False,
) -> dict[str, np.ndarray]:
    """``{"y": x @ W.T, "rows": table[ids]}`` computed in ONNX Runtime from GGUF blocks.

    ``matmul`` and ``table`` are GGUF tensors (``[N, K]`` rows = outputs, with
    ``repack()``/``numpy()``); each stands for a float initializer that
    :func:`~mobius.passes.quantize_int4` then replaces, keeping the blocks (as a
    GGUF build does) unless ``requantize``. Returns the outputs, plus
    ``"model"``: the ``onnx_ir`` model after the pass.
    """
    import onnxruntime as ort

    from mobius.passes import quantize_int4

    inputs, outputs, nodes, feeds, sources = [], [], [], {}, {}
    if matmul is not None:
        n, k = matmul.shape
        weight = TransposedParameter(n, k, name="w")
        weight.const_value = ir.Tensor(np.ascontiguousarray(matmul.numpy().T), name="w")
        x_value = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(x.shape))
        nodes.append(ir.node("MatMul", [x_value, weight], name="matmul"))
        inputs.append(x_value)
        outputs.append(("y", nodes[-1]))
        feeds["x"], sources["w"] = x, matmul
    if table is not None:
        t = ir.Value(name="table", const_value=ir.Tensor(table.numpy(), name="table"))
        t.shape, t.type = ir.Shape(table.shape), ir.TensorType(ir.DataType.FLOAT)
        ids_value = ir.Value(
            name="input_ids", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape(ids.shape)
        )
        nodes.append(ir.node("Gather", [t, ids_value], {"axis": 0}, name="embed"))
        inputs.append(ids_value)
        outputs.append(("rows", nodes[-1]))
        feeds["input_ids"], sources["table"] = ids, table
    for name, node in outputs:
        node.outputs[0].name = name
    initializers = [v for node in nodes for v in node.inputs if v.const_value is not None]
    graph = ir.Graph(
        inputs,
        [node.outputs[0] for _, node in outputs],
        nodes=nodes,
        initializers=initializers,
        opset_imports={"": 21},
    )
    model = ir.Model(graph, ir_version=10)
    quantize_int4(
        model,
        accuracy_level=accuracy_level,
        prequantized=sources,
        rtn=requantize,
        requantize=requantize,
        embeddings=requantize,
    )
    proto = ir.serde.serialize_model(model)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(
        proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    names = [name for name, _ in outputs]
    return {**dict(zip(names, session.run(names, feeds), strict=True)), "model": model}
