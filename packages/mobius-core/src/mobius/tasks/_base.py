"""A task turns a module tree into an ``ir.Model`` with a fixed input/output contract."""

from __future__ import annotations

import onnx_ir as ir
import onnxscript

OPSET = 23
IR_VERSION = 10


class ModelTask:
    """Base of the I/O contracts. Subclasses implement :meth:`build`."""

    name: str = ""

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        """Return the graphs of the task, keyed by their path in the package (``"model"``)."""
        raise NotImplementedError


def new_graph(name: str) -> tuple[ir.Graph, onnxscript.GraphBuilder]:
    """An empty graph at mobius's opset, and a builder over it."""
    graph = ir.Graph([], [], nodes=[], opset_imports={"": OPSET}, name=name)
    return graph, onnxscript.GraphBuilder(graph)


def set_output(builder, value: ir.Value, name: str, dtype: ir.DataType, shape) -> None:
    """Name a graph output and state its type and (symbolic) shape."""
    value.type = ir.TensorType(dtype)
    value.shape = ir.Shape(shape)
    if value.producer() is None or value in builder.graph.outputs:
        value = builder.op.Identity(value)  # a graph input or an output used twice
    builder.add_output(value, name)


def twin_module(module):
    """A second module tree of the same config and parameter types, for another graph.

    A parameter belongs to the graph that first uses it, so each graph of a
    multi-graph task is built from its own tree; the shared names bring each the
    same checkpoint tensors.
    """
    twin = type(module)(module.config)
    for mine, theirs in zip(twin.parameters(), module.parameters(), strict=True):
        mine.type = theirs.type
    return twin
