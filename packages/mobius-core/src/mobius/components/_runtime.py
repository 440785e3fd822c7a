"""The runtime a graph is built for: portable ONNX, or ONNX Runtime's fused contrib ops.

``default`` graphs use only standard ONNX operators and run anywhere. ``cpu`` and
``cuda`` graphs use ONNX Runtime's ``com.microsoft`` kernels where they are
faster. The target is an argument of the task that makes the graph
(:func:`mobius.tasks.new_graph`), which records it in the graph's metadata;
components read it from the graph they emit into (:func:`execution_provider_of`),
and the build applies the matching graph passes afterwards (``mobius.passes``).
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.options import EXECUTION_PROVIDERS

MS_DOMAIN = "com.microsoft"
#: The graph metadata key that holds the graph's execution provider.
EP_META = "mobius.execution_provider"

__all__ = [
    "EXECUTION_PROVIDERS",
    "MS_DOMAIN",
    "execution_provider_of",
    "fused_ops",
    "mark_target",
    "typed_like",
]


def mark_target(graph: ir.Graph, ep: str) -> None:
    """Record that ``graph`` is built for ``ep`` (one of ``EXECUTION_PROVIDERS``)."""
    if ep not in EXECUTION_PROVIDERS:
        raise ValueError(
            f"unknown execution provider {ep!r}; choose one of {', '.join(EXECUTION_PROVIDERS)}"
        )
    graph.meta[EP_META] = ep


def execution_provider_of(op) -> str:
    """The execution provider of the graph ``op`` (a builder's ``op``) emits into.

    A subgraph (a Scan or Loop body) has the target of the graph that holds it.
    """
    builder = op.builder
    while builder is not None:
        ep = builder.graph.meta.get(EP_META)
        if ep is not None:
            return ep
        builder = builder.parent
    return "default"


def fused_ops(op) -> bool:
    """Whether the graph ``op`` emits into may use ONNX Runtime's fused contrib ops."""
    return execution_provider_of(op) != "default"


def typed_like(value: ir.Value, like: ir.Value) -> ir.Value:
    """``value`` (a contrib op's output) given ``like``'s dtype where that is known: ONNX's
    type inference stops at ONNX Runtime's contrib ops, and later blocks read dtypes."""
    if like.dtype is not None:
        value.dtype = like.dtype
    return value
