"""The blocks of Wan's causal 3-D VAE (:mod:`mobius_diffusion.models.autoencoder_kl_wan`).

Each causal conv, and so each block, runs either over a whole clip from its first
frame (``cache=None``: zero frames in front) or as one step of diffusers'
frame-by-frame decode (a :class:`FrameCache`: the frames the previous step left in
front, the first step's none); see :class:`FrameCache`.
"""

from __future__ import annotations

import math

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv2d, Conv3d, bidirectional_attention
from mobius.errors import ConfigError


def _ints(op, values):
    return op.Constant(value_ints=list(values))


def _frames(op, x, start, end):
    """``x[:, :, start:end]`` of ``[b, c, t, h, w]``; ``start``/``end`` ints or int64 ``[1]``."""
    start, end = (_ints(op, [v]) if isinstance(v, int) else v for v in (start, end))
    return op.Slice(x, start, end, _ints(op, [2]))


def _sizes(op, x) -> list:
    """Each axis of ``x`` as int64 ``[1]``."""
    return [op.Shape(x, start=i, end=i + 1) for i in range(5)]


def _silu(op, x):
    return op.Mul(x, op.Sigmoid(x))


def _pad_front(op, x, frames):
    """``frames`` (int64 ``[1]``) zero frames in front of ``[b, c, t, h, w]``."""
    return op.Pad(x, op.Concat(_ints(op, [0, 0]), frames, _ints(op, [0] * 7), axis=0))


class FrameCache:
    """diffusers' ``feat_cache`` for one decoder step: each causal conv's input frames carried
    to the next step.

    ``past`` maps each conv (by ``id``) to the frames the previous step left: none on the
    first step, then the last ``front_frames`` (2) of the conv's input, the zero padding
    included; the conv puts what it leaves in ``present``. Causality makes a conv over
    ``past + frames`` equal to its slice of a conv over the whole clip; what diffusers'
    first chunk does on its own (a temporal upsample passes its frame through and starts its
    cache at zeros) keys on an empty past (:meth:`first`).
    """

    def __init__(self, past: dict[int, ir.Value]) -> None:
        self.past, self.present = past, {}

    def first(self, op, conv):
        """int64 ``[1]``: 1 when ``conv``'s past has no frames (the first step), else 0."""
        count = op.Shape(self.past[id(conv)], start=2, end=3)
        return op.Sub(_ints(op, [1]), op.Min(count, _ints(op, [1])))


class CausalConv3d(Conv3d):
    """``WanCausalConv3d``: ``2 * padding[0]`` zero frames in front, symmetric zero padding in space."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, padding=0) -> None:
        pad_t, pad_h, pad_w = [padding] * 3 if isinstance(padding, int) else padding
        super().__init__(in_channels, out_channels, kernel_size, padding=(0, pad_h, pad_w))
        self.in_channels = in_channels
        self.front_frames = 2 * pad_t

    def forward(self, op, x, cache: FrameCache | None = None):
        if not self.front_frames:
            return super().forward(op, x)
        if cache is None:
            return super().forward(op, _pad_front(op, x, _ints(op, [self.front_frames])))
        past = cache.past[id(self)]  # zeros stand for the frames it lacks, as diffusers pads
        missing = op.Sub(_ints(op, [self.front_frames]), op.Shape(past, start=2, end=3))
        x = _pad_front(op, op.Concat(past, x, axis=2), missing)
        cache.present[id(self)] = _frames(op, x, -self.front_frames, 2**62)
        return super().forward(op, x)


class FrameConv2d(Conv2d):
    """A checkpoint's 2-D 3x3 conv run on every frame of ``[b, c, t, h, w]``; ``pads`` (top, left, bottom, right)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, pads) -> None:
        super().__init__(in_channels, out_channels, 3, stride=stride)
        top, left, bottom, right = pads
        self.frame_attrs = dict(
            kernel_shape=[1, 3, 3],
            strides=[1, stride, stride],
            pads=[0, top, left, 0, bottom, right],
        )

    def forward(self, op, x):
        weight = op.Unsqueeze(self.weight, _ints(op, [2]))  # [o, i, 1, 3, 3]
        return op.Conv(x, weight, self.bias, **self.frame_attrs)


class RMSNorm(nn.Module):
    """``WanRMS_norm``: ``F.normalize`` over the channels (axis 1), times ``sqrt(dim) * gamma``."""

    def __init__(self, dim: int, spatial_dims: int = 3) -> None:
        super().__init__()
        self.gamma = nn.Parameter([dim] + [1] * spatial_dims)
        self.scale = math.sqrt(dim)

    def forward(self, op, x):
        norm = op.Max(op.ReduceL2(x, _ints(op, [1]), keepdims=1), op.CastLike(1e-12, x))
        return op.Mul(op.Div(x, norm), op.Mul(self.gamma, op.CastLike(self.scale, x)))


class ResidualBlock(nn.Module):
    """``WanResidualBlock``: norm, SiLU, causal conv, twice; ``conv_shortcut`` when the width changes."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.norm1 = RMSNorm(in_dim)
        self.conv1 = CausalConv3d(in_dim, out_dim, 3, padding=1)
        self.norm2 = RMSNorm(out_dim)
        self.conv2 = CausalConv3d(out_dim, out_dim, 3, padding=1)
        self.conv_shortcut = CausalConv3d(in_dim, out_dim, 1) if in_dim != out_dim else None

    def forward(self, op, x, cache: FrameCache | None = None):
        shortcut = x if self.conv_shortcut is None else self.conv_shortcut(op, x)
        x = self.conv1(op, _silu(op, self.norm1(op, x)), cache)
        x = self.conv2(op, _silu(op, self.norm2(op, x)), cache)
        return op.Add(x, shortcut)


class AttentionBlock(nn.Module):
    """``WanAttentionBlock``: one head over each frame's pixels (``to_qkv``, ``proj``: 1x1 convs)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim
        self.norm = RMSNorm(dim, spatial_dims=2)
        self.to_qkv = Conv2d(dim, 3 * dim, 1)
        self.proj = Conv2d(dim, dim, 1)

    def forward(self, op, x):
        frame_major = op.Transpose(x, perm=[0, 2, 1, 3, 4])  # [b, t, c, h, w]
        frames = op.Reshape(
            frame_major,
            op.Concat(_ints(op, [-1]), op.Shape(x, start=1, end=2), op.Shape(x, start=3), axis=0),
        )
        qkv = self.to_qkv(op, self.norm(op, frames))  # [b*t, 3c, h, w]
        qkv = op.Transpose(op.Reshape(qkv, _ints(op, [0, 0, -1])), perm=[0, 2, 1])
        q, k, v = op.Split(qkv, num_outputs=3, axis=-1, _outputs=3)
        out = bidirectional_attention(op, q, k, v, None, 1, self.dim**-0.5)  # [b*t, h*w, c]
        out = self.proj(op, op.Reshape(op.Transpose(out, perm=[0, 2, 1]), op.Shape(frames)))
        out = op.Transpose(op.Reshape(out, op.Shape(frame_major)), perm=[0, 2, 1, 3, 4])
        return op.Add(out, x)


class Resample(nn.Module):
    """``WanResample``: a per-frame 3x3 conv after a 2x nearest upsample, or with stride 2;
    the temporal modes add ``time_conv`` (see the module docstring for their first frame)."""

    def __init__(self, dim: int, mode: str, upsample_out_dim: int | None = None) -> None:
        super().__init__()
        self.mode = mode
        if mode.startswith("upsample"):
            conv = FrameConv2d(dim, upsample_out_dim or dim // 2, 1, (1, 1, 1, 1))
        else:
            conv = FrameConv2d(dim, dim, 2, (0, 0, 1, 1))
        self.resample = nn.ModuleList([nn.Module(), conv])  # 0: the pad or upsample, no weights
        self.time_conv = None
        if mode == "upsample3d":
            self.time_conv = CausalConv3d(dim, 2 * dim, (3, 1, 1), padding=(1, 0, 0))
        elif mode == "downsample3d":
            self.time_conv = Conv3d(dim, dim, (3, 1, 1), stride=(2, 1, 1))

    def forward(self, op, x, cache: FrameCache | None = None):
        if self.mode == "upsample3d":
            x = self.upsample_time(op, x, cache)
        if self.mode.startswith("upsample"):
            scales = op.Constant(value=ir.tensor([1.0, 1.0, 1.0, 2.0, 2.0], ir.DataType.FLOAT))
            nearest = dict(coordinate_transformation_mode="asymmetric", nearest_mode="floor")
            x = op.Resize(x, None, scales, mode="nearest", **nearest)  # = nearest-exact at 2x
        x = self.resample[1](op, x)
        return self.downsample_time(op, x) if self.mode == "downsample3d" else x

    def upsample_time(self, op, x, cache: FrameCache | None = None):
        """Each frame -> two frames from ``time_conv``'s channel halves; but on the first step
        (a whole clip, or diffusers' first chunk) frame 0 passes as it is, and ``time_conv``
        sees zeros in its place."""
        first = _ints(op, [1]) if cache is None else cache.first(op, self.time_conv)
        later = _pad_front(op, _frames(op, x, first, 2**62), first)
        doubled = self.time_conv(op, later, cache)  # [b, 2c, t, h, w]
        b, c, t, h, w = _sizes(op, x)
        halves = op.Reshape(doubled, op.Concat(b, _ints(op, [2]), c, t, h, w, axis=0))
        pairs = op.Transpose(halves, perm=[0, 2, 3, 1, 4, 5])  # [b, c, t, 2, h, w]
        twice = op.Mul(t, _ints(op, [2]))
        sequence = op.Reshape(pairs, op.Concat(b, c, twice, h, w, axis=0))
        passed, dropped = _frames(op, x, 0, first), op.Mul(first, _ints(op, [2]))
        return op.Concat(passed, _frames(op, sequence, dropped, 2**62), axis=2)

    def downsample_time(self, op, x):
        """Frame 0 as it is, then ``time_conv`` over frames ``(0, 1, 2), (2, 3, 4)...``."""
        padded = op.Pad(x, _ints(op, [0] * 7 + [2, 0, 0]))  # two frames behind: a 1-frame clip runs
        strided = self.time_conv(op, padded)
        count = op.Div(op.Sub(op.Shape(x, start=2, end=3), _ints(op, [1])), _ints(op, [2]))
        return op.Concat(_frames(op, x, 0, 1), _frames(op, strided, 0, count), axis=2)


def _whole_ratio(numerator: int, denominator: int) -> int:
    """The channel ratio of a Wan 2.2 shortcut, which diffusers requires whole."""
    if numerator % denominator:
        raise ConfigError(
            f"AutoencoderKLWan: a residual shortcut maps {numerator} values onto {denominator} "
            "channels; base_dim, decoder_base_dim and dim_mult must make that whole"
        )
    return numerator // denominator


class AvgDown3D(nn.Module):
    """``AvgDown3D`` (Wan 2.2): the mean of each ``factor_t x factor_s x factor_s`` block and of
    ``group`` channels; an even clip gets a zero frame in front."""

    def __init__(self, in_channels: int, out_channels: int, factor_t: int, factor_s: int) -> None:
        super().__init__()
        self.factor_t, self.factor_s, self.out_channels = factor_t, factor_s, out_channels
        self.group = _whole_ratio(in_channels * factor_t * factor_s * factor_s, out_channels)

    def forward(self, op, x):
        ft, fs = self.factor_t, self.factor_s
        if ft > 1:
            frames = op.Shape(x, start=2, end=3)
            front = op.Mod(
                op.Sub(_ints(op, [ft]), op.Mod(frames, _ints(op, [ft]))), _ints(op, [ft])
            )
            x = op.Pad(x, op.Concat(_ints(op, [0, 0]), front, _ints(op, [0] * 7), axis=0))
        b, c, t, h, w = _sizes(op, x)
        blocks = [
            op.Div(t, _ints(op, [ft])),
            op.Div(h, _ints(op, [fs])),
            op.Div(w, _ints(op, [fs])),
        ]
        split = [b, c]
        for count, factor in zip(blocks, (ft, fs, fs), strict=True):
            split += [count, _ints(op, [factor])]
        x = op.Reshape(x, op.Concat(*split, axis=0))
        x = op.Transpose(x, perm=[0, 1, 3, 5, 7, 2, 4, 6])  # [b, c, ft, fs, fs, t', h', w']
        x = op.Reshape(x, op.Concat(b, _ints(op, [self.out_channels, self.group]), *blocks, axis=0))
        return op.ReduceMean(x, _ints(op, [2]), keepdims=0)


class DupUp3D(nn.Module):
    """``DupUp3D`` (Wan 2.2): channels repeated, then spread over ``factor_t x factor_s x factor_s``
    blocks; on the first step (``first``, int64 ``[1]``; ``None``: a whole clip) the first
    ``factor_t - 1`` frames dropped (diffusers' first chunk)."""

    def __init__(self, in_channels: int, out_channels: int, factor_t: int, factor_s: int) -> None:
        super().__init__()
        self.factor_t, self.factor_s, self.out_channels = factor_t, factor_s, out_channels
        self.repeats = _whole_ratio(out_channels * factor_t * factor_s * factor_s, in_channels)

    def forward(self, op, x, first=None):
        ft, fs = self.factor_t, self.factor_s
        b, c, t, h, w = _sizes(op, x)
        repeated = op.Expand(
            op.Unsqueeze(x, _ints(op, [2])),
            op.Concat(b, c, _ints(op, [self.repeats]), t, h, w, axis=0),
        )
        x = op.Reshape(
            repeated, op.Concat(b, _ints(op, [self.out_channels, ft, fs, fs]), t, h, w, axis=0)
        )
        x = op.Transpose(x, perm=[0, 1, 5, 2, 6, 3, 7, 4])  # [b, out, t, ft, h, fs, w, fs]
        scaled = [
            op.Mul(t, _ints(op, [ft])),
            op.Mul(h, _ints(op, [fs])),
            op.Mul(w, _ints(op, [fs])),
        ]
        x = op.Reshape(x, op.Concat(b, _ints(op, [self.out_channels]), *scaled, axis=0))
        if ft == 1:
            return x
        return _frames(
            op, x, ft - 1 if first is None else op.Mul(first, _ints(op, [ft - 1])), 2**62
        )


class ResidualDownBlock(nn.Module):
    """``WanResidualDownBlock`` (Wan 2.2): resnets and an optional ``downsampler``, plus ``avg_shortcut``."""

    def __init__(self, in_dim, out_dim, num_res_blocks: int, temporal: bool, down: bool) -> None:
        super().__init__()
        self.avg_shortcut = AvgDown3D(in_dim, out_dim, 2 if temporal else 1, 2 if down else 1)
        dims = [in_dim] + [out_dim] * num_res_blocks
        self.resnets = nn.ModuleList(
            [ResidualBlock(a, b) for a, b in zip(dims[:-1], dims[1:], strict=True)]
        )
        mode = "downsample3d" if temporal else "downsample2d"
        self.downsampler = Resample(out_dim, mode) if down else None

    def forward(self, op, x):
        shortcut = self.avg_shortcut(op, x)
        for resnet in self.resnets:
            x = resnet(op, x)
        if self.downsampler is not None:
            x = self.downsampler(op, x)
        return op.Add(x, shortcut)


class MidBlock(nn.Module):
    """``WanMidBlock``: resnet, attention, resnet."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.resnets = nn.ModuleList([ResidualBlock(dim, dim), ResidualBlock(dim, dim)])
        self.attentions = nn.ModuleList([AttentionBlock(dim)])

    def forward(self, op, x, cache: FrameCache | None = None):
        x = self.resnets[0](op, x, cache)
        return self.resnets[1](op, self.attentions[0](op, x), cache)
