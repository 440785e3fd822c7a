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
