"""A task turns a module tree into an ``ir.Model`` with a fixed input/output contract."""

from __future__ import annotations

import onnx_ir as ir
import onnxscript

OPSET = 23
IR_VERSION = 10


class ModelTask:
    """Base of the I/O contracts. Subclasses implement :meth:`build`.

    ``ep`` is the runtime the graphs are built for (``"default"``, ``"cpu"``,
    ``"cuda"``): each graph made with :meth:`new_graph` records it, and the
    components read it from there (:func:`mobius.components.fused_ops`).
    """

    name: str = ""
    #: Whether onnxruntime-genai's generator runs this task's packages
    #: (:meth:`genai_config` then writes its config).
    genai: bool = False

    def __init__(self, ep: str = "default") -> None:
        self.ep = ep

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        """Return the graphs of the task, keyed by their path in the package (``"model"``)."""
        raise NotImplementedError

    def new_graph(self, name: str) -> tuple[ir.Graph, onnxscript.GraphBuilder]:
        """An empty graph for this task's execution provider, and a builder over it."""
        return new_graph(name, self.ep)

    def configure(self, config, options, source):
        """The normalised config with the build options this task reads applied.

        ``options`` is the :class:`~mobius.options.BuildOptions`, ``source`` the
        :class:`~mobius.source.ModelSource` being built. The base refuses the
        encoder options, which only tasks with heads read.
        """
        from mobius.errors import ConfigError

        if options.head not in ("auto", "none") or options.pooling or options.normalize is not None:
            raise ConfigError(
                f"--head, --pooling and --normalize apply to encoder models; "
                f"{source.entry.key} is a {self.name} model"
            )
        return config

    def genai_config(self, package) -> dict:
        """``genai_config.json`` for onnxruntime-genai's generator, or GenAIUnsupportedError."""
        from mobius.genai import GenAIUnsupportedError

        raise GenAIUnsupportedError(
            f"onnxruntime-genai's generator does not run {self.name} models"
        )


def new_graph(name: str, ep: str = "default") -> tuple[ir.Graph, onnxscript.GraphBuilder]:
    """An empty graph at mobius's opset built for ``ep``, and a builder over it."""
    from mobius.components._runtime import mark_target

    graph = ir.Graph([], [], nodes=[], opset_imports={"": OPSET}, name=name)
    mark_target(graph, ep)
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
