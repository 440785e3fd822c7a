"""The runtime a graph is built for: portable ONNX, or ONNX Runtime's fused contrib ops.

``default`` graphs use only standard ONNX operators and run anywhere. ``cpu`` and
``cuda`` graphs use ONNX Runtime's ``com.microsoft`` kernels where they are
faster: components ask :func:`fused_ops` while the graph is built, and the
build applies the matching graph passes afterwards (``mobius.passes``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

EXECUTION_PROVIDERS = ("default", "cpu", "cuda")
MS_DOMAIN = "com.microsoft"

_target: ContextVar[str] = ContextVar("mobius_execution_provider", default="default")


@contextlib.contextmanager
def execution_provider(ep: str) -> Iterator[None]:
    """Build the graphs created inside this block for ``ep`` (one of ``EXECUTION_PROVIDERS``)."""
    if ep not in EXECUTION_PROVIDERS:
        raise ValueError(
            f"unknown execution provider {ep!r}; choose one of {', '.join(EXECUTION_PROVIDERS)}"
        )
    token = _target.set(ep)
    try:
        yield
    finally:
        _target.reset(token)


def current_execution_provider() -> str:
    """The execution provider of the graph being built."""
    return _target.get()


def fused_ops() -> bool:
    """Whether the graph being built may use ONNX Runtime's fused contrib ops."""
    return _target.get() != "default"
