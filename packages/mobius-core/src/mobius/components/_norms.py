"""Normalisation layers."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript import nn


class RMSNorm(nn.Module):
    """``x / rms(x) * weight`` over the last axis, accumulated in float32 (ONNX ``RMSNormalization``)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter([dim])
        self.eps = eps

    def forward(self, op, x: ir.Value) -> ir.Value:
        return op.RMSNormalization(x, self.weight, axis=-1, epsilon=self.eps, stash_type=1)


class LayerNorm(nn.Module):
    """Layer normalisation over the last axis, with optional affine bias."""

    def __init__(self, dim: int, eps: float = 1e-5, bias: bool = True) -> None:
        super().__init__()
        self.weight = nn.Parameter([dim])
        self.bias = nn.Parameter([dim]) if bias else None
        self.eps = eps

    def forward(self, op, x: ir.Value) -> ir.Value:
        if self.bias is None:
            return op.LayerNormalization(x, self.weight, axis=-1, epsilon=self.eps, stash_type=1)
        return op.LayerNormalization(
            x, self.weight, self.bias, axis=-1, epsilon=self.eps, stash_type=1
        )


class WeightlessRMSNorm(nn.Module):
    """``x / rms(x)`` over the last axis, in float32, with no learned scale."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, op, x: ir.Value) -> ir.Value:
        ones = op.CastLike(op.Constant(value=ir.tensor(np.ones(self.dim, np.float32))), x)
        return op.RMSNormalization(x, ones, axis=-1, epsilon=self.eps, stash_type=1)
