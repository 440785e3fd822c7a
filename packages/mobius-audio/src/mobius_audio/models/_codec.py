"""Pieces the neural audio codecs (DAC, EnCodec) and the VITS vocoder share: convolutions, weight norm, codebooks.

Convolutions keep the ``[batch, channels, time]`` layout of their checkpoints.
Weight-normalised checkpoints store each convolution's weight as a magnitude
``weight_g`` and a direction ``weight_v`` (or, from ``torch.nn.utils.
parametrizations``, ``parametrizations.weight.original0`` / ``original1``);
:func:`fold_weight_norm` turns each pair into the plain ``weight`` the graph reads,
once, at build time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.weights import DerivedTensor

#: The two spellings of a weight-norm pair: (magnitude suffix, direction suffix).
_WEIGHT_NORM_SUFFIXES = (
    (".weight_g", ".weight_v"),
    (".parametrizations.weight.original0", ".parametrizations.weight.original1"),
)


def _fold(magnitude, direction) -> np.ndarray:
    """``g * v / ||v||``, the norm over every axis but the first (torch's ``dim=0``)."""
    g = magnitude.numpy().astype(np.float32)
    v = direction.numpy().astype(np.float32)
    norm = np.sqrt((v.astype(np.float64) ** 2).sum(axis=tuple(range(1, v.ndim)), keepdims=True))
    return (g * (v / norm)).astype(np.float32)


def fold_weight_norm(weights: Mapping[str, Any]) -> dict[str, Any]:
    """``weights`` with every weight-norm pair replaced by the ``weight`` it stands for."""
    out = dict(weights)
    for magnitude_suffix, direction_suffix in _WEIGHT_NORM_SUFFIXES:
        for name in [n for n in out if n.endswith(magnitude_suffix)]:
            stem = name[: -len(magnitude_suffix)]
            direction = out.pop(stem + direction_suffix, None)
            if direction is None:
                continue  # a lone magnitude: apply_weights reports it as unexpected
            magnitude = out.pop(name)
            out[stem + ".weight"] = DerivedTensor(
                lambda g=magnitude, v=direction: _fold(g, v), direction.shape, ir.DataType.FLOAT
            )
    return out


class CodecConv1d(nn.Module):
    """``torch.nn.Conv1d`` with symmetric zero padding and dilation: ``[batch, cin, time]``."""

    def __init__(
        self,
        cin: int,
        cout: int,
        kernel: int,
        *,
        stride: int = 1,
        dilation: int = 1,
        pad: int = 0,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter([cout, cin, kernel])
        self.bias = nn.Parameter([cout]) if bias else None
        self.kernel, self.stride, self.dilation, self.pad = kernel, stride, dilation, pad

    def forward(self, op, x):
        return op.Conv(
            x,
            self.weight,
            self.bias,
            kernel_shape=[self.kernel],
            strides=[self.stride],
            dilations=[self.dilation],
            pads=[self.pad, self.pad],
        )


class CodecConvTranspose1d(nn.Module):
    """``torch.nn.ConvTranspose1d`` (weight ``[cin, cout, kernel]``) cropping ``pads`` (left, right)."""

    def __init__(
        self, cin: int, cout: int, kernel: int, *, stride: int, pads: tuple[int, int] = (0, 0)
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter([cin, cout, kernel])
        self.bias = nn.Parameter([cout])
        self.kernel, self.stride, self.pads = kernel, stride, pads

    def forward(self, op, x):
        return op.ConvTranspose(
            x,
            self.weight,
            self.bias,
            kernel_shape=[self.kernel],
            strides=[self.stride],
            pads=list(self.pads),
        )


def sum_of_codebook_rows(op, tables: list, audio_codes):
    """``[batch, dim, frames]``: the sum over the first ``K`` stages of ``tables[k][codes[:, k]]``.

    ``tables`` holds each quantizer's ``[codebook_size, dim]`` rows as the decoder
    adds them (after any output projection); ``audio_codes`` int64 ``[batch, K,
    frames]`` may carry fewer stages than there are tables (a lower bandwidth): the
    tables are stacked and indexed at ``k * codebook_size + code``, so ``K`` is read
    from the input, not fixed in the graph.
    """
    rows = op.Concat(*tables, axis=0)  # [stages * codebook_size, dim]
    size = op.Shape(tables[0], start=0, end=1)  # [1]: codebook_size
    stages = op.Shape(audio_codes, start=1, end=2)
    first = op.Range(
        op.Constant(value_int=0), op.Squeeze(stages, [0]), op.Constant(value_int=1)
    )  # [K]
    offsets = op.Reshape(op.Mul(first, size), op.Constant(value_ints=[1, -1, 1]))
    picked = op.Gather(rows, op.Add(audio_codes, offsets), axis=0)  # [batch, K, frames, dim]
    return op.Transpose(op.ReduceSum(picked, [1], keepdims=0), perm=[0, 2, 1])
