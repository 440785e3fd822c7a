"""Building blocks of VITS over ``[batch, channels, time]`` tensors: convs, masks, flips, constants.

Every tensor here is channels-first, as VITS keeps it; ``mask`` is the float
``[batch, 1, time]`` padding mask (1 real, 0 padding).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm


def floats(op, value):
    """A float32 constant (a scalar or an array)."""
    return op.Constant(value=ir.tensor(np.asarray(value, np.float32)))


def ints(op, value):
    """An int64 constant (a scalar or an array)."""
    return op.Constant(value=ir.tensor(np.asarray(value, np.int64)))


class Conv1d(nn.Module):
    """``torch.nn.Conv1d`` with its ``padding`` split into ``(left, right)``, dilation and groups."""

    def __init__(
        self,
        cin: int,
        cout: int,
        kernel: int = 1,
        pads: tuple[int, int] = (0, 0),
        dilation: int = 1,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter([cout, cin // groups, kernel])
        self.bias = nn.Parameter([cout]) if bias else None
        self.kernel, self.pads, self.dilation, self.groups = kernel, pads, dilation, groups

    def forward(self, op, x):
        return op.Conv(
            x,
            self.weight,
            self.bias,
            kernel_shape=[self.kernel],
            pads=list(self.pads),
            dilations=[self.dilation],
            group=self.groups,
        )


def same_conv(cin: int, cout: int, kernel: int, dilation: int = 1, **kwargs) -> Conv1d:
    """A conv that keeps the length, padded ``(kernel * dilation - dilation) // 2`` each side."""
    pad = (kernel * dilation - dilation) // 2
    return Conv1d(cin, cout, kernel, (pad, pad), dilation, **kwargs)


class ChannelLayerNorm(LayerNorm):
    """LayerNorm over the channels of a ``[batch, channels, time]`` tensor."""

    def forward(self, op, x):
        x = super().forward(op, op.Transpose(x, perm=[0, 2, 1]))
        return op.Transpose(x, perm=[0, 2, 1])


def flip_channels(op, x):
    """``torch.flip(x, [1])``: the channel axis reversed."""
    big = np.iinfo(np.int64).max
    return op.Slice(x, ints(op, [-1]), ints(op, [-big]), ints(op, [1]), ints(op, [-1]))


def split_channels(op, x, first: int):
    """``x[:, :first]`` and ``x[:, first:]``."""
    big = np.iinfo(np.int64).max
    head = op.Slice(x, ints(op, [0]), ints(op, [first]), ints(op, [1]))
    tail = op.Slice(x, ints(op, [first]), ints(op, [big]), ints(op, [1]))
    return head, tail
