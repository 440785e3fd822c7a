"""Strict application of checkpoint tensors to a graph's parameters.

Every parameter must be filled and every checkpoint tensor used (or explicitly
ignored); shapes and dtypes are checked before anything is read. Tensors stay
lazy: each is read, cast and laid out only when it is written to disk.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy)
import numpy as np
import onnx_ir as ir

from mobius.components import checkpoint_shape
from mobius.errors import WeightMismatchError

_MAX_LISTED = 12


class WeightSource(Protocol):
    """What a checkpoint tensor offers: shape and dtype without reading, and its data on demand."""

    shape: tuple[int, ...]
    dtype: ir.DataType

    def numpy(self) -> np.ndarray: ...


class DerivedTensor:
    """A tensor computed from others on demand (a split, a merge, a reshape) by ``preprocess_weights``."""

    def __init__(self, fn, shape: tuple[int, ...], dtype: ir.DataType) -> None:
        self._fn, self.shape, self.dtype = fn, tuple(shape), dtype

    def numpy(self) -> np.ndarray:
        return self._fn()


def parameters(model: ir.Model) -> dict[str, ir.Value]:
    """The initializers that still need data: the module tree's parameters."""
    return {name: v for name, v in model.graph.initializers.items() if v.const_value is None}


def _listing(title: str, items: list[str]) -> str:
    shown = ", ".join(items[:_MAX_LISTED])
    more = f" (+{len(items) - _MAX_LISTED} more)" if len(items) > _MAX_LISTED else ""
    return f"{title} ({len(items)}): {shown}{more}"


def _dtype_fits(source: ir.DataType, target: ir.DataType) -> bool:
    if source.is_floating_point() and target.is_floating_point():
        return True  # floats cast to the build dtype
    return source == target


def _lazy(param: ir.Value, source: WeightSource) -> ir.LazyTensor:
    target = param.dtype.numpy()
    layout = getattr(param, "from_checkpoint", None)

    def load() -> ir.Tensor:
        array = source.numpy()
        if array.dtype != target:
            array = array.astype(target)
        if layout is not None:
            array = layout(array)
        return ir.Tensor(np.ascontiguousarray(array), name=param.name)

    return ir.LazyTensor(load, dtype=param.dtype, shape=ir.Shape(param.shape), name=param.name)


def apply_weights(
    models: ir.Model | Iterable[ir.Model],
    weights: Mapping[str, Any],
    *,
    ignore: Iterable[str] = (),
) -> None:
    """Fill every parameter of ``models`` from ``weights``, or raise listing every problem.

    ``ignore`` holds glob patterns of checkpoint tensors that are known to be unused
    (rotary caches, for example); any other unused tensor is an error.
    """
    models = [models] if isinstance(models, ir.Model) else list(models)
    params: dict[str, ir.Value] = {}
    for model in models:
        params.update(parameters(model))
    patterns = list(ignore)

    missing = sorted(set(params) - set(weights))
    unexpected = sorted(
        name
        for name in set(weights) - set(params)
        if not any(fnmatch.fnmatchcase(name, p) for p in patterns)
    )
    bad_shape, bad_dtype = [], []
    for name in sorted(set(params) & set(weights)):
        param, source = params[name], weights[name]
        expected = checkpoint_shape(param)
        if tuple(source.shape) != expected:
            bad_shape.append(f"{name} {list(source.shape)} (expected {list(expected)})")
        elif not _dtype_fits(source.dtype, param.dtype):
            bad_dtype.append(f"{name} {source.dtype.name} (expected {param.dtype.name})")

    problems = [
        _listing(title, items)
        for title, items in (
            ("missing", missing),
            ("unexpected", unexpected),
            ("wrong shape", bad_shape),
            ("wrong dtype", bad_dtype),
        )
        if items
    ]
    if problems:
        raise WeightMismatchError("checkpoint does not match the graph: " + "; ".join(problems))

    for name, param in params.items():
        param.const_value = _lazy(param, weights[name])
