"""Naming parameters by their module path when a module is used outside its parent's forward."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from onnxscript import nn


@contextlib.contextmanager
def module_scope(op, *modules: nn.Module) -> Iterator[None]:
    """Push the scopes of ``modules`` (outermost first) and realize their own parameters, as their calls would.

    Parameters are named by the chain of module calls that reaches them. An
    encoder–decoder's encoder graph computes the decoder's cross-attention keys
    and values, outside the decoder's own forward: inside
    ``module_scope(op, decoder, decoder.block[0], ...)`` they keep their checkpoint
    names (``decoder.block.0.layer.1.EncDecAttention.k.weight``).
    """
    builder = op.builder
    for module in modules:
        builder.push_module(module._name or "", type(module).__qualname__)  # noqa: SLF001
        for parameter in module._parameters.values():  # noqa: SLF001
            parameter._realize(builder)  # noqa: SLF001
    try:
        yield
    finally:
        for _ in modules:
            builder.pop_module()


def realize_parameters(op, *chain: nn.Module) -> None:
    """Name and register every parameter below the last of ``chain`` (``chain`` as in :func:`module_scope`).

    A control-flow body (an ``If`` branch) is traced by a sub-builder whose module
    scopes the root graph does not see; realizing the parameters first, in the
    root, gives them their checkpoint names.
    """
    with module_scope(op, *chain):
        for child in chain[-1].children():
            if isinstance(child, nn.ModuleList):  # its items carry the full name ("layers.0")
                for item in child.children():
                    realize_parameters(op, item)
            else:
                realize_parameters(op, child)
