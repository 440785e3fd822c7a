"""Strict application of checkpoint tensors to a graph's parameters.

Every parameter must be filled and every checkpoint tensor used (or explicitly
ignored); shapes and dtypes are checked before anything is read. Tensors stay
lazy: each is read, cast and laid out only when it is written to disk, and freed
once written, so a build holds about one tensor (and its cast copy) at a time.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy)
import numpy as np
import onnx_ir as ir

from mobius.components import checkpoint_shape
from mobius.errors import WeightMismatchError

_MAX_LISTED = 12


class WeightSource(Protocol):
    """What a checkpoint tensor offers: shape and dtype without reading, and its data on demand.

    A source may also have ``slabs()``, as :class:`CheckpointTensor` does: runs of
    rows read into a small buffer, which lets a cast or transpose stream.
    """

    shape: tuple[int, ...]
    dtype: ir.DataType

    def numpy(self) -> np.ndarray: ...


class DerivedTensor:
    """A tensor computed from others on demand (a split, a merge, a reshape) by ``sanitize``."""

    def __init__(self, fn, shape: tuple[int, ...], dtype: ir.DataType) -> None:
        self._fn, self.shape, self.dtype = fn, tuple(shape), dtype

    def numpy(self) -> np.ndarray:
        return self._fn()


def rename_prefixes(weights: Mapping[str, Any], renames: Mapping[str, str]) -> dict[str, Any]:
    """``weights`` with each name's checkpoint prefix replaced by its module path.

    ``renames`` maps old prefixes to new ones and is tried in order, the first match
    winning, so a longer prefix goes before a shorter one it starts with. Names no
    prefix matches are kept as they are.
    """
    renamed = {}
    for name, tensor in weights.items():
        old = next((prefix for prefix in renames if name.startswith(prefix)), None)
        renamed[name if old is None else renames[old] + name[len(old) :]] = tensor
    return renamed


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
    # A parameter whose ``from_checkpoint`` is a plain transpose may name its axes:
    # the tensor is then read, cast and transposed in one pass (see _streamed_copy).
    axes = getattr(param, "checkpoint_axes", None)

    def load() -> ir.Tensor:
        # Runs once per tensor, as it is written; nothing here outlives the write.
        if (
            hasattr(source, "slabs")
            and len(source.shape) > 0
            and (layout is None or axes is not None)
            and (axes is not None or source.dtype.numpy() != target)
        ):
            return ir.Tensor(_streamed_copy(source, axes, target), name=param.name)
        # Each step rebinds ``array``, so its input (a mapping of the checkpoint, or a
        # copy) is freed as soon as the step is done.
        array = source.numpy()
        # ``from_checkpoint`` only moves data (transpose, split), so it commutes with
        # the cast: run it on the narrower side, so that at most the source plus one
        # target-sized copy exist at once.
        widen = target.itemsize > array.dtype.itemsize
        if layout is not None and widen:
            array = layout(array)
        if array.dtype != target:
            array = array.astype(target)
        if layout is not None and not widen:
            array = layout(array)
        return ir.Tensor(np.ascontiguousarray(array), name=param.name)

    rows = None
    if tuple(axes or ()) == (1, 0) and hasattr(source, "slabs"):

        def rows(max_bytes: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
            for start, slab in source.slabs(max_bytes):
                yield start, slab.astype(target, copy=False)

    return StreamedTensor(load, rows, dtype=param.dtype, shape=param.shape, name=param.name)


class StreamedTensor(ir.LazyTensor):
    """A parameter's lazy tensor, read from the checkpoint each time it is used.

    For a 2-D weight stored transposed from its checkpoint (MatMul's ``[K, N]`` from
    a ``[N, K]`` linear weight), :meth:`transposed_rows` also streams the rows of its
    transpose straight from the checkpoint, so a consumer that wants ``[N, K]`` rows
    (int4 quantization) needs neither the whole tensor nor a transposed copy.
    """

    __slots__ = ("_rows",)

    def __init__(self, load, rows, *, dtype: ir.DataType, shape, name: str) -> None:
        super().__init__(load, dtype=dtype, shape=ir.Shape(shape), name=name)
        self._rows = rows

    def transposed_rows(
        self, max_bytes: int | None = None
    ) -> Iterator[tuple[int, np.ndarray]] | None:
        """``(first row, rows)`` runs of this ``[K, N]`` tensor's transpose, or None.

        Each run is a ``[count, K]`` array in this tensor's dtype, valid until the
        next run is read (copy what you keep); None when the tensor is not a
        transposed checkpoint weight.
        """
        return None if self._rows is None else self._rows(max_bytes)


# Rows per step of a transposing copy: enough to amortise the Python loop, few enough
# that their cache lines stay resident while each output row is filled (a plain
# ``ascontiguousarray(a.T)`` of a large 2-byte matrix is ~5x slower).
_TRANSPOSE_ROWS = 32


def _streamed_copy(source: Any, axes: tuple[int, ...] | None, target: np.dtype) -> np.ndarray:
    """``ascontiguousarray(source.numpy().transpose(axes).astype(target))``, in one pass.

    The source is read a slab of rows at a time (``source.slabs()``) into a small
    buffer and each slab is cast and transposed straight into the output, so only
    the output and that buffer are ever held, never the whole source as well.
    """
    shape = tuple(source.shape)
    if axes is None:
        out = np.empty(shape, target)
        view = out
    else:
        out = np.empty([shape[a] for a in axes], target)
        view = out.transpose(np.argsort(axes))  # ``out``, indexed in checkpoint order
    for start, rows in source.slabs():
        _copy_into(view[start : start + len(rows)], rows)
    return out


def _copy_into(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` (casting), a few rows at a time where ``dst`` is a transposed view."""
    if src.ndim > 2 and not dst.flags.c_contiguous:
        for i in range(src.shape[0]):
            _copy_into(dst[i], src[i])
    elif src.ndim == 2 and not dst.flags.c_contiguous:
        for i in range(0, src.shape[0], _TRANSPOSE_ROWS):
            dst[i : i + _TRANSPOSE_ROWS] = src[i : i + _TRANSPOSE_ROWS]
    else:
        dst[...] = src


def apply_weights(
    models: ir.Model | Iterable[ir.Model],
    weights: Mapping[str, Any],
    *,
    ignore: Iterable[str] = (),
    unread: Iterable[str] = (),
) -> None:
    """Fill every parameter of ``models`` from ``weights``, or raise listing every problem.

    ``ignore`` holds glob patterns of checkpoint tensors that are known to be unused
    (rotary caches, for example); any other unused tensor is an error. ``unread``
    names parameters the module declared but a graph pass removed because no node
    reads them (a backbone stage past the last feature map taken): their tensors
    belong to the model, so they are not unexpected.
    """
    models = [models] if isinstance(models, ir.Model) else list(models)
    params: dict[str, ir.Value] = {}
    copies: list[tuple[str, ir.Value]] = []  # a name several graphs hold (shared embeddings)
    for model in models:
        for name, value in parameters(model).items():
            if name in params:
                copies.append((name, value))
            else:
                params[name] = value
    patterns = list(ignore)
    unread = set(unread)

    missing = sorted(set(params) - set(weights))
    unexpected = sorted(
        name
        for name in set(weights) - set(params) - unread
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

    for name, param in [*params.items(), *copies]:
        param.const_value = _lazy(param, weights[name])
