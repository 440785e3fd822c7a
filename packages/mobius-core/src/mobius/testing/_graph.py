"""Run one module as a graph in ONNX Runtime: the unit-test harness for components."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import onnx_ir as ir

from mobius.tasks._base import IR_VERSION, new_graph


def module_graph(forward: Callable, inputs: Mapping[str, np.ndarray]) -> ir.Model:
    """Build ``forward(op, *graph_inputs)`` into a model whose inputs match ``inputs``' dtypes and ranks."""
    graph, builder = new_graph("unit")
    values = [
        builder.input(name, ir.DataType.from_numpy(a.dtype), [f"{name}_{i}" for i in range(a.ndim)])
        for name, a in inputs.items()
    ]
    outputs = forward(builder.op, *values)
    outputs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
    for i, out in enumerate(outputs):
        result = builder.op.Identity(out)
        result.type = out.type or ir.TensorType(ir.DataType.FLOAT)
        builder.add_output(result, f"output_{i}")
    return ir.Model(graph, ir_version=IR_VERSION)


def run_module(
    forward: Callable,
    inputs: Mapping[str, np.ndarray],
    params: Mapping[str, np.ndarray] | None = None,
) -> list[np.ndarray]:
    """Build ``forward`` over ``inputs``, fill its parameters from ``params`` by name, run it on CPU."""
    import onnxruntime as ort

    model = module_graph(forward, inputs)
    params = dict(params or {})
    for name, value in model.graph.initializers.items():
        if value.const_value is None:
            value.const_value = ir.tensor(params.pop(name), name=name)
    if params:
        raise KeyError(f"parameters not in the graph: {sorted(params)}")
    proto = ir.serde.serialize_model(model)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, dict(inputs))
