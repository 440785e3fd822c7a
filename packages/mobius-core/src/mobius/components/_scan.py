"""Bodies of ``Scan`` (and ``Loop``) ops for step-by-step recurrences."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import onnx_ir as ir


def scan_body(
    op, step: Callable, inputs: Sequence[ir.Value], outputs: Sequence[ir.Value], name: str
) -> ir.Graph:
    """Trace ``step(op, *inputs)`` into a body graph whose value names live under ``name``.

    A subgraph builder numbers its values from zero again; without a scope of its
    own the body could reuse a name of the outer graph, which ONNX forbids (SSA).
    """

    def scoped(op, *args):
        op.builder.push_module(name, "")
        try:
            return step(op, *args)
        finally:
            op.builder.pop_module()

    return op.builder.subgraph(scoped, inputs=inputs, outputs=outputs, name=name)
