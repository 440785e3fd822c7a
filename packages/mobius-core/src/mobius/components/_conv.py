"""Convolutions and the normalisations that go with them, over channels-first tensors.

Parameters are named as ``torch.nn`` names them (``weight``, ``bias``,
``running_mean``, ``running_var``), so checkpoints map by identity. Shared by the vision, audio and diffusion families.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir
from onnxscript import nn


class Conv2d(nn.Module):
    """``torch.nn.Conv2d``; ``padding`` is an int, ``(top, left, bottom, right)`` or ``"same"`` (TF SAME)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        padding: int | Sequence[int] | str = 0,
        dilation: int = 1,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        super().__init__()
        k = kernel_size
        self.weight = nn.Parameter([out_channels, in_channels // groups, k, k])
        self.bias = nn.Parameter([out_channels]) if bias else None
        self.attrs = dict(
            kernel_shape=[k, k], strides=[stride, stride], dilations=[dilation, dilation]
        )
        self.attrs["group"] = groups
        if padding == "same" and stride == 1:  # size-independent; ORT's SAME_UPPER has no dilation
            before, after = (k - 1) // 2 * dilation, (k - 1 - (k - 1) // 2) * dilation
            self.attrs["pads"] = [before, before, after, after]
        elif padding == "same":
            self.attrs["auto_pad"] = "SAME_UPPER"
        elif isinstance(padding, int):
            self.attrs["pads"] = [padding] * 4
        else:
            top, left, bottom, right = padding
            self.attrs["pads"] = [top, left, bottom, right]

    def forward(self, op, x):
        inputs = [x, self.weight] + ([self.bias] if self.bias is not None else [])
        return op.Conv(*inputs, **self.attrs)


class Conv3d(nn.Module):
    """``torch.nn.Conv3d`` over ``[batch, channels, frames, height, width]``.

    ``kernel_size``, ``stride``, ``padding`` and ``dilation`` are an int or a
    ``(time, height, width)`` triple; padding is symmetric on each axis.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        super().__init__()
        kernel, stride, padding, dilation = (
            [v] * 3 if isinstance(v, int) else list(v)
            for v in (kernel_size, stride, padding, dilation)
        )
        self.weight = nn.Parameter([out_channels, in_channels // groups, *kernel])
        self.bias = nn.Parameter([out_channels]) if bias else None
        self.attrs = dict(
            kernel_shape=kernel, strides=stride, dilations=dilation, pads=padding * 2, group=groups
        )

    def forward(self, op, x):
        inputs = [x, self.weight] + ([self.bias] if self.bias is not None else [])
        return op.Conv(*inputs, **self.attrs)


class BatchNorm(nn.Module):
    """``torch.nn.BatchNorm1d/2d/3d`` in eval mode over ``[batch, channels, *spatial]``.

    Normalises with the running statistics the checkpoint saved (any rank: ONNX
    BatchNormalization reads the channels on axis 1).
    """

    def __init__(self, num_features: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter([num_features])
        self.bias = nn.Parameter([num_features])
        self.running_mean = nn.Parameter([num_features])
        self.running_var = nn.Parameter([num_features])
        self.eps = eps

    def forward(self, op, x):
        return op.BatchNormalization(
            x, self.weight, self.bias, self.running_mean, self.running_var, epsilon=self.eps
        )


class GroupNorm(nn.Module):
    """``torch.nn.GroupNorm`` over ``[batch, channels, *spatial]``: statistics per group of channels.

    Mean and variance over ``[batch, groups, -1]`` in the input's dtype (ONNX's
    GroupNormalization-18 takes per-group scales, which torch does not have).
    ``spatial_dims`` is how many axes follow the channels (2 for images, 3 for video).
    """

    def __init__(
        self,
        num_groups: int,
        num_channels: int,
        eps: float = 1e-5,
        affine: bool = True,
        spatial_dims: int = 2,
    ) -> None:
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(f"{num_channels} channels do not split into {num_groups} groups")
        self.num_groups, self.eps, self.spatial_dims = num_groups, eps, spatial_dims
        self.weight = nn.Parameter([num_channels]) if affine else None
        self.bias = nn.Parameter([num_channels]) if affine else None

    def forward(self, op, x: ir.Value) -> ir.Value:
        axis = op.Constant(value_ints=[2])
        grouped = op.Reshape(x, op.Constant(value_ints=[0, self.num_groups, -1]))  # [b, g, rest]
        centred = op.Sub(grouped, op.ReduceMean(grouped, axis, keepdims=1))
        var = op.ReduceMean(op.Mul(centred, centred), axis, keepdims=1)
        normed = op.Div(centred, op.Sqrt(op.Add(var, op.CastLike(self.eps, x))))
        y = op.Reshape(normed, op.Shape(x))
        if self.weight is None:
            return y
        per_channel = op.Constant(value_ints=[-1] + [1] * self.spatial_dims)  # [C, 1, 1]
        return op.Add(
            op.Mul(y, op.Reshape(self.weight, per_channel)), op.Reshape(self.bias, per_channel)
        )
