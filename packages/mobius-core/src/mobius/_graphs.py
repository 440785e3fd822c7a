"""Module tree → graphs: the dtype of a build and the graphs a task makes of a module tree."""

from __future__ import annotations

import onnx_ir as ir

DTYPES = {
    "f32": ir.DataType.FLOAT,
    "f16": ir.DataType.FLOAT16,
    "bf16": ir.DataType.BFLOAT16,
}


def parse_dtype(dtype: str | ir.DataType | None) -> ir.DataType | None:
    """``"f32" | "f16" | "bf16"`` (or an ``ir.DataType``) to an ``ir.DataType``."""
    if dtype is None or isinstance(dtype, ir.DataType):
        return dtype
    from mobius.options import canonical_dtype

    try:
        return DTYPES[canonical_dtype(dtype)]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}") from None


def cast_parameters(module, dtype: ir.DataType) -> None:
    """Give every floating-point parameter of ``module`` the build dtype (before the graph is built)."""
    for param in module.parameters():
        if param.dtype is not None and param.dtype.is_floating_point():
            param.type = ir.TensorType(dtype)
