"""The x-vector head's pieces: TDNN layers and statistics pooling over the real frames.

transformers' ``*ForXVector`` projects the encoder states, runs dilated TDNN convs
(each stored as a ``kernel`` Linear ``[out, kernel * in]``), pools each row's mean
and unbiased standard deviation over its real frames, and maps the pair to the
embedding; ``classifier`` turns the embedding into logits (the AM-softmax
``objective`` only trains).
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn


class TDNNKernel(nn.Module):
    """The checkpoint's ``kernel`` Linear, ``weight [out, kernel * in]``, read as transformers
    reads it: ``[out, kernel, in]`` transposed to the conv layout ``[out, in, kernel]``."""

    def __init__(self, cin: int, cout: int, kernel: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([cout, kernel * cin])
        self.bias = nn.Parameter([cout])
        self.shape = [cout, kernel, cin]

    def forward(self, op):  # -> (conv weight [out, in, kernel], bias [out])
        return op.Transpose(op.Reshape(self.weight, self.shape), perm=[0, 2, 1]), self.bias


class TDNNLayer(nn.Module):
    """A dilated Conv1d (no padding) and ReLU over ``[batch, frames, cin]``."""

    def __init__(self, cin: int, cout: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.kernel = TDNNKernel(cin, cout, kernel)
        self.size, self.dilation = kernel, dilation

    def forward(self, op, x):
        weight, bias = self.kernel(op)
        y = op.Conv(
            op.Transpose(x, perm=[0, 2, 1]),
            weight,
            bias,
            kernel_shape=[self.size],
            dilations=[self.dilation],
        )
        return op.Relu(op.Transpose(y, perm=[0, 2, 1]))


def statistics_pooling(op, x, frame_mask, kernels: tuple[int, ...]):
    """``[batch, 2 * channels]``: mean and unbiased std of ``x [batch, frames', channels]``.

    transformers counts each row's TDNN frames as its real frames less ``kernel - 1``
    per layer, dilation left out, so a row may count frames past its audio; the count
    is capped by the frames there are, which is also what it does without a mask.
    """
    real = op.ReduceSum(
        op.Cast(frame_mask, to=ir.DataType.INT64), [1], keepdims=1
    )  # int64 [batch, 1]
    lengths = op.Sub(real, sum(k - 1 for k in kernels))
    frames = op.Squeeze(op.Shape(x, start=1, end=2), [0])
    positions = op.Range(op.Constant(value_int=0), frames, op.Constant(value_int=1))
    counted = op.Less(op.Unsqueeze(positions, [0]), lengths)  # [batch, frames']
    weight = op.CastLike(op.Unsqueeze(counted, [2]), x)  # [batch, frames', 1]
    count = op.ReduceSum(weight, [1], keepdims=0)  # [batch, 1]
    mean = op.Div(op.ReduceSum(op.Mul(x, weight), [1], keepdims=0), count)
    centred = op.Mul(op.Sub(x, op.Unsqueeze(mean, [1])), weight)
    one = op.CastLike(op.Constant(value_float=1.0), x)
    variance = op.Div(op.ReduceSum(op.Mul(centred, centred), [1], keepdims=0), op.Sub(count, one))
    return op.Concat(mean, op.Sqrt(variance), axis=-1)
