"""VITS's stochastic duration predictor, run in reverse (inference): noise -> log durations.

The predictor conditions a stack of flows on the text encoder's states and turns
standard-normal noise ``[batch, 2, text]`` (scaled by ``noise_scale_duration``)
into log durations. Inference runs the flows backwards and, as transformers does,
skips the first convolutional flow (``flows[1]``, unused at inference). Each
convolutional flow moves its second channel through a monotonic rational-quadratic
spline (identity outside ``[-tail_bound, tail_bound]``), inverted here in closed form.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius_audio.models._vits_layers import (
    ChannelLayerNorm,
    Conv1d,
    flip_channels,
    floats,
    ints,
    same_conv,
    split_channels,
)

# transformers' spline floors (min_bin_width, min_bin_height, min_derivative).
MIN_BIN = 1e-3
MIN_DERIVATIVE = 1e-3


class DilatedDepthSeparableConv(nn.Module):
    """Residual depthwise (dilation ``kernel**i``) + pointwise convs, each LayerNorm + GELU."""

    def __init__(self, channels: int, kernel: int, num_layers: int) -> None:
        super().__init__()
        self.convs_dilated = nn.ModuleList(
            [
                same_conv(channels, channels, kernel, dilation=kernel**i, groups=channels)
                for i in range(num_layers)
            ]
        )
        self.convs_pointwise = nn.ModuleList(
            [Conv1d(channels, channels) for _ in range(num_layers)]
        )
        # nn.LayerNorm's default eps: transformers does not pass the config's here.
        self.norms_1 = nn.ModuleList([ChannelLayerNorm(channels) for _ in range(num_layers)])
        self.norms_2 = nn.ModuleList([ChannelLayerNorm(channels) for _ in range(num_layers)])

    def forward(self, op, x, mask, condition=None):
        if condition is not None:
            x = op.Add(x, condition)
        for dilated, pointwise, norm_1, norm_2 in zip(
            self.convs_dilated, self.convs_pointwise, self.norms_1, self.norms_2, strict=True
        ):
            h = op.Gelu(norm_1(op, dilated(op, op.Mul(x, mask))))
            h = op.Gelu(norm_2(op, pointwise(op, h)))
            x = op.Add(x, h)
        return op.Mul(x, mask)


class ElementwiseAffine(nn.Module):
    """``x * exp(log_scale) + translate`` per channel; inverted at inference."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.translate = nn.Parameter([channels, 1])
        self.log_scale = nn.Parameter([channels, 1])

    def forward(self, op, x, mask, condition):  # the inverse: inference runs flows backwards
        scale = op.Exp(op.Neg(self.log_scale))
        return op.Mul(op.Mul(op.Sub(x, self.translate), scale), mask)


class ConvFlow(nn.Module):
    """A coupling flow: the first channel parameterises a spline over the second."""

    def __init__(self, channels: int, kernel: int, num_layers: int, bins: int, tail: float):
        super().__init__()
        self.bins, self.tail, self.channels = bins, tail, channels
        self.conv_pre = Conv1d(1, channels)
        self.conv_dds = DilatedDepthSeparableConv(channels, kernel, num_layers)
        self.conv_proj = Conv1d(channels, 3 * bins - 1)

    def forward(self, op, x, mask, condition):  # the inverse: inference runs flows backwards
        first, second = split_channels(op, x, 1)
        h = self.conv_dds(op, self.conv_pre(op, first), mask, condition)
        h = op.Mul(self.conv_proj(op, h), mask)  # [batch, 3 * bins - 1, text]
        h = op.Transpose(op.Unsqueeze(h, [1]), perm=[0, 1, 3, 2])  # [batch, 1, text, 3b-1]
        bins, root = self.bins, floats(op, math.sqrt(self.channels))
        widths = op.Div(op.Slice(h, ints(op, [0]), ints(op, [bins]), ints(op, [3])), root)
        heights = op.Div(op.Slice(h, ints(op, [bins]), ints(op, [2 * bins]), ints(op, [3])), root)
        derivatives = op.Slice(h, ints(op, [2 * bins]), ints(op, [3 * bins]), ints(op, [3]))
        second = inverse_spline(op, second, widths, heights, derivatives, bins, self.tail)
        return op.Mul(op.Concat(first, second, axis=1), mask)


def _knots(op, unnormalised, bins: int, tail: float):
    """Bin edges ``[..., bins + 1]`` from ``-tail`` to ``tail`` and the bin sizes ``[..., bins]``."""
    sizes = op.Add(
        floats(op, MIN_BIN),
        op.Mul(floats(op, 1 - MIN_BIN * bins), op.Softmax(unnormalised, axis=-1)),
    )
    edges = op.Sub(op.Mul(floats(op, 2 * tail), op.CumSum(sizes, ints(op, -1))), floats(op, tail))
    inner = op.Slice(edges, ints(op, [0]), ints(op, [bins - 1]), ints(op, [-1]))
    like = op.Slice(edges, ints(op, [0]), ints(op, [1]), ints(op, [-1]))  # [..., 1]
    low = op.Expand(floats(op, [-tail]), op.Shape(like))
    high = op.Expand(floats(op, [tail]), op.Shape(like))
    edges = op.Concat(
        low, inner, high, axis=-1
    )  # the ends exactly +-tail, as transformers sets them
    sizes = op.Sub(
        op.Slice(edges, ints(op, [1]), ints(op, [bins + 1]), ints(op, [-1])),
        op.Slice(edges, ints(op, [0]), ints(op, [bins]), ints(op, [-1])),
    )
    return edges, sizes


def _pick(op, table, index):
    """``table[..., index]`` with ``index [..., 1]``: the selected bin's value ``[...]``."""
    return op.Squeeze(op.GatherElements(table, index, axis=-1), [-1])


def inverse_spline(op, x, widths, heights, derivatives, bins: int, tail: float):
    """The inverse of transformers' unconstrained rational-quadratic spline, elementwise on ``x``.

    ``widths``/``heights`` ``[..., bins]``, ``derivatives`` ``[..., bins - 1]`` (the
    inner knots; the outer ones are fixed so that the slope is 1 at the tails).
    Values outside ``[-tail, tail]`` pass through unchanged.
    """
    end = float(np.log(np.exp(1 - MIN_DERIVATIVE) - 1))  # softplus(end) + min = 1
    like = op.Slice(derivatives, ints(op, [0]), ints(op, [1]), ints(op, [-1]))
    fixed = op.Expand(floats(op, [end]), op.Shape(like))
    derivatives = op.Concat(fixed, derivatives, fixed, axis=-1)
    derivatives = op.Add(floats(op, MIN_DERIVATIVE), op.Softplus(derivatives))
    cumwidths, widths = _knots(op, widths, bins, tail)
    cumheights, heights = _knots(op, heights, bins, tail)

    # The bin of each value, searched among the height knots (the last nudged up, as there).
    nudge = np.zeros(bins + 1, np.float32)
    nudge[-1] = 1e-6
    locations = op.Add(cumheights, floats(op, nudge))
    above = op.Cast(op.GreaterOrEqual(op.Unsqueeze(x, [-1]), locations), to=ir.DataType.INT64)
    index = op.Sub(op.ReduceSum(above, ints(op, [-1]), keepdims=1), ints(op, 1))
    index = op.Clip(
        index, ints(op, 0), ints(op, bins - 1)
    )  # out-of-range values are passed through

    delta = op.Div(heights, widths)
    in_cumwidth, in_width = _pick(op, cumwidths, index), _pick(op, widths, index)
    in_cumheight, in_height = _pick(op, cumheights, index), _pick(op, heights, index)
    in_delta = _pick(op, delta, index)
    in_derivative = _pick(op, derivatives, index)
    upper = op.Slice(derivatives, ints(op, [1]), ints(op, [bins + 1]), ints(op, [-1]))
    in_derivative_next = _pick(op, upper, index)

    # Solve the rational quadratic for theta: a theta^2 + b theta + c = 0.
    slopes = op.Sub(op.Add(in_derivative, in_derivative_next), op.Mul(floats(op, 2.0), in_delta))
    offset = op.Sub(x, in_cumheight)
    skew = op.Mul(offset, slopes)
    a = op.Add(op.Mul(in_height, op.Sub(in_delta, in_derivative)), skew)
    b = op.Sub(op.Mul(in_height, in_derivative), skew)
    c = op.Neg(op.Mul(in_delta, offset))
    discriminant = op.Sub(op.Mul(b, b), op.Mul(floats(op, 4.0), op.Mul(a, c)))
    root = op.Div(op.Mul(floats(op, 2.0), c), op.Sub(op.Neg(b), op.Sqrt(discriminant)))
    inside_value = op.Add(op.Mul(root, in_width), in_cumwidth)
    inside = op.And(op.GreaterOrEqual(x, floats(op, -tail)), op.LessOrEqual(x, floats(op, tail)))
    return op.Where(inside, inside_value, x)


class StochasticDurationPredictor(nn.Module):
    """``duration_predictor`` of a VITS checkpoint; only the inference path is built.

    The posterior branch (``post_*``) trains the predictor and is not read.
    """

    def __init__(self, config) -> None:
        super().__init__()
        channels, kernel = config.hidden_size, config.duration_predictor_kernel_size
        layers = config.depth_separable_num_layers
        self.conv_pre = Conv1d(channels, channels)
        self.conv_proj = Conv1d(channels, channels)
        self.conv_dds = DilatedDepthSeparableConv(channels, kernel, layers)
        flow = lambda: ConvFlow(  # noqa: E731
            channels,
            kernel,
            layers,
            config.duration_predictor_flow_bins,
            config.duration_predictor_tail_bound,
        )
        self.flows = nn.ModuleList(
            [ElementwiseAffine(2)] + [flow() for _ in range(config.duration_predictor_num_flows)]
        )
        self.noise_scale = config.noise_scale_duration
        self.cond = None
        if config.num_speakers > 1:
            self.cond = Conv1d(config.speaker_embedding_size, channels)

    def forward(self, op, hidden, mask, noise, speaker=None):
        """``hidden [batch, hidden, text]``, ``noise [batch, 2, text]`` -> log durations ``[batch, 1, text]``.

        ``speaker [batch, speaker_embedding_size, 1]`` conditions a multi-speaker model.
        """
        x = self.conv_pre(op, hidden)
        if self.cond is not None:
            x = op.Add(x, self.cond(op, speaker))
        condition = op.Mul(self.conv_proj(op, self.conv_dds(op, x, mask)), mask)
        latents = op.Mul(noise, floats(op, self.noise_scale))
        flows = list(self.flows)
        for flow in [*reversed(flows[2:]), flows[0]]:  # flows[1] is unused at inference
            latents = flow(op, flip_channels(op, latents), mask, condition)
        log_duration, _ = split_channels(op, latents, 1)
        return log_duration
