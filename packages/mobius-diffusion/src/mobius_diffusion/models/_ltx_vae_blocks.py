"""The blocks of LTX-Video's VAE over ``[batch, channels, frames, height, width]``.

Convs pad time by repeating the edge frames (the first ``k - 1`` in front when
causal, ``(k - 1) / 2`` of the first and last otherwise) and space with zeros.
Norms are RMS norms over the channels without weights (eps 1e-8). Resnets may be
timestep-modulated (``scale_shift_table`` plus the block's embedded timestep) and
add noise after each conv (``per_channel_scale1``/``2`` times a ``[height, width]``
noise shared by every batch row, channel and frame): the noise is an input, one per
draw, in diffusers' draw order. Names follow diffusers' checkpoints.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv3d, LayerNorm
from mobius_diffusion.models._dit_blocks import _ints
from mobius_diffusion.models.pixart import PixArtAlphaCombinedTimestepSizeEmbeddings

#: diffusers' eps of every RMS norm of the VAE (fixed, not in the config).
RMS_EPS = 1e-8


def silu(op, x):
    return op.Mul(x, op.Sigmoid(x))


def channel_rms(op, x):
    """diffusers' ``RMSNorm(elementwise_affine=False)`` over the channels, in float32."""
    x32 = op.Cast(x, to=ir.DataType.FLOAT)
    mean_square = op.ReduceMean(op.Mul(x32, x32), _ints(op, [1]), keepdims=1)
    return op.CastLike(op.Div(x32, op.Sqrt(op.Add(mean_square, RMS_EPS))), x)


def sizes(op, x) -> list:
    """Each axis of ``x`` as int64 ``[1]``."""
    return [op.Shape(x, start=i, end=i + 1) for i in range(5)]


def frames(op, x, start: int, end: int):
    """``x[:, :, start:end]``."""
    return op.Slice(x, _ints(op, [start]), _ints(op, [end]), _ints(op, [2]))


def space_to_depth(op, x, stride):
    """``[b, c, t*st, h*sh, w*sw]`` -> ``[b, c*st*sh*sw, t, h, w]``, channels (c, st, sh, sw)."""
    b, c, t, h, w = sizes(op, x)
    st, sh, sw = (_ints(op, [s]) for s in stride)
    small = [op.Div(n, s) for n, s in ((t, st), (h, sh), (w, sw))]
    x = op.Reshape(x, op.Concat(b, c, small[0], st, small[1], sh, small[2], sw, axis=0))
    x = op.Transpose(x, perm=[0, 1, 3, 5, 7, 2, 4, 6])
    return op.Reshape(x, op.Concat(b, _ints(op, [-1]), *small, axis=0))


def depth_to_space(op, x, stride):
    """The inverse of :func:`space_to_depth`."""
    b, _, t, h, w = sizes(op, x)
    x = op.Reshape(x, op.Concat(b, _ints(op, [-1, *stride]), t, h, w, axis=0))
    x = op.Transpose(x, perm=[0, 1, 5, 2, 6, 3, 7, 4])  # [b, c, t, st, h, sh, w, sw]
    big = [op.Mul(n, _ints(op, [s])) for n, s in zip((t, h, w), stride, strict=True)]
    return op.Reshape(x, op.Concat(b, _ints(op, [-1]), *big, axis=0))


def modulation(op, table, temb, count: int) -> list:
    """``temb [b, count*c] + table [count, c]`` -> ``count`` vectors ``[b, c, 1, 1, 1]``."""
    table = op.Reshape(table, _ints(op, [count, -1, 1, 1, 1]))
    rows = op.Add(op.Reshape(temb, _ints(op, [0, count, -1, 1, 1, 1])), table)
    return [
        op.Squeeze(v, _ints(op, [1]))
        for v in op.Split(rows, axis=1, num_outputs=count, _outputs=count)
    ]


class CausalConv3d(nn.Module):
    """diffusers' ``LTXVideoCausalConv3d``: edge frames repeated in time, zeros in space."""

    def __init__(self, cin: int, cout: int, kernel: int = 3, stride=1, is_causal=True) -> None:
        super().__init__()
        self.conv = Conv3d(cin, cout, kernel, stride=stride, padding=(0, kernel // 2, kernel // 2))
        self.front = kernel - 1 if is_causal else (kernel - 1) // 2
        self.back = 0 if is_causal else (kernel - 1) // 2

    def forward(self, op, x):
        parts = [x]
        if self.front:
            parts.insert(0, op.Tile(frames(op, x, 0, 1), _ints(op, [1, 1, self.front, 1, 1])))
        if self.back:
            last = frames(op, x, -1, 2**62)
            parts.append(op.Tile(last, _ints(op, [1, 1, self.back, 1, 1])))
        return self.conv(op, op.Concat(*parts, axis=2) if len(parts) > 1 else x)


class ChannelLayerNorm(LayerNorm):
    """``nn.LayerNorm`` over the channels of a video (the resnets' ``norm3``)."""

    def forward(self, op, x):
        x = op.Transpose(x, perm=[0, 2, 3, 4, 1])
        return op.Transpose(super().forward(op, x), perm=[0, 4, 1, 2, 3])


class ResnetBlock3d(nn.Module):
    """diffusers' ``LTXVideoResnetBlock3d``; ``noise`` yields the block's noise inputs in order."""

    def __init__(self, cin, cout, eps, is_causal, inject_noise=False, conditioned=False):
        super().__init__()
        self.conv1 = CausalConv3d(cin, cout, is_causal=is_causal)
        self.conv2 = CausalConv3d(cout, cout, is_causal=is_causal)
        self.norm3 = self.conv_shortcut = None
        if cin != cout:
            self.norm3 = ChannelLayerNorm(cin, eps)
            self.conv_shortcut = CausalConv3d(cin, cout, kernel=1, is_causal=is_causal)
        self.per_channel_scale1 = nn.Parameter([cin, 1, 1]) if inject_noise else None
        self.per_channel_scale2 = nn.Parameter([cin, 1, 1]) if inject_noise else None
        self.scale_shift_table = nn.Parameter([4, cin]) if conditioned else None

    def add_noise(self, op, x, scale, noise: Iterator | None):
        if scale is None:
            return x
        spatial = op.Mul(op.Unsqueeze(op.CastLike(next(noise), x), _ints(op, [0])), scale)
        return op.Add(x, op.Unsqueeze(spatial, _ints(op, [0, 2])))  # [1, c, 1, h, w]

    def forward(self, op, x, temb=None, noise: Iterator | None = None):
        h = channel_rms(op, x)
        if self.scale_shift_table is not None:
            shift1, scale1, shift2, scale2 = modulation(op, self.scale_shift_table, temb, 4)
            h = op.Add(op.Mul(h, op.Add(scale1, 1.0)), shift1)
        h = self.add_noise(op, self.conv1(op, silu(op, h)), self.per_channel_scale1, noise)
        h = channel_rms(op, h)
        if self.scale_shift_table is not None:
            h = op.Add(op.Mul(h, op.Add(scale2, 1.0)), shift2)
        h = self.add_noise(op, self.conv2(op, silu(op, h)), self.per_channel_scale2, noise)
        if self.norm3 is not None:
            x = self.conv_shortcut(op, self.norm3(op, x))
        return op.Add(h, x)


class Downsampler3d(nn.Module):
    """0.9.5's ``LTXVideoDownsampler3d``: the conv folded to depth plus the input's group means."""

    def __init__(self, cin: int, cout: int, stride, is_causal: bool) -> None:
        super().__init__()
        self.stride, self.group = stride, cin * math.prod(stride) // cout
        self.conv = CausalConv3d(cin, cout // math.prod(stride), is_causal=is_causal)

    def forward(self, op, x):
        if self.stride[0] > 1:  # the first frames again in front
            x = op.Concat(frames(op, x, 0, self.stride[0] - 1), x, axis=2)
        residual = space_to_depth(op, x, self.stride)
        b, _, t, h, w = sizes(op, residual)
        grouped = op.Concat(b, _ints(op, [-1, self.group]), t, h, w, axis=0)
        residual = op.ReduceMean(op.Reshape(residual, grouped), _ints(op, [2]), keepdims=0)
        return op.Add(space_to_depth(op, self.conv(op, x), self.stride), residual)


class Upsampler3d(nn.Module):
    """``LTXVideoUpsampler3d``: the conv unfolded from depth, the first frame dropped; with
    ``residual`` (0.9.1+) plus the input unfolded and repeated to the output's channels."""

    stride = (2, 2, 2)

    def __init__(self, cin: int, is_causal: bool, residual: bool, upscale_factor: int) -> None:
        super().__init__()
        self.residual, self.repeats = residual, 8 // upscale_factor
        self.conv = CausalConv3d(cin, cin * 8 // upscale_factor, is_causal=is_causal)

    def forward(self, op, x):
        out = frames(op, depth_to_space(op, self.conv(op, x), self.stride), 1, 2**62)
        if not self.residual:
            return out
        residual = op.Tile(
            depth_to_space(op, x, self.stride), _ints(op, [1, self.repeats, 1, 1, 1])
        )
        return op.Add(out, frames(op, residual, 1, 2**62))


class DownBlock3D(nn.Module):
    """``LTXVideoDownBlock3D`` (0.9.0) or, ``downsample_type`` given, ``LTXVideo095DownBlock3D``."""

    def __init__(self, cin, cout, layers, eps, scale, is_causal, downsample_type=None):
        super().__init__()
        self.resnets = nn.ModuleList(
            [ResnetBlock3d(cin, cin, eps, is_causal) for _ in range(layers)]
        )
        self.downsamplers = self.conv_out = None
        strides = {"spatial": (1, 2, 2), "temporal": (2, 1, 1), "spatiotemporal": (2, 2, 2)}
        if scale and downsample_type in strides:
            sampler = Downsampler3d(cin, cout, strides[downsample_type], is_causal)
            self.downsamplers = nn.ModuleList([sampler])
        elif scale:
            sampler = CausalConv3d(cin, cin, stride=2, is_causal=is_causal)
            self.downsamplers = nn.ModuleList([sampler])
        if downsample_type is None and cin != cout:
            self.conv_out = ResnetBlock3d(cin, cout, eps, is_causal)

    def forward(self, op, x):
        for resnet in self.resnets:
            x = resnet(op, x)
        if self.downsamplers is not None:
            x = self.downsamplers[0](op, x)
        return x if self.conv_out is None else self.conv_out(op, x)


class MidBlock3d(nn.Module):
    """``LTXVideoMidBlock3d``: resnets, their timestep embedded by the block (``time_embedder``)."""

    def __init__(self, channels, layers, eps, is_causal, inject_noise=False, conditioned=False):
        super().__init__()
        self.time_embedder = None
        if conditioned:
            self.time_embedder = PixArtAlphaCombinedTimestepSizeEmbeddings(4 * channels, False)
        self.resnets = nn.ModuleList(
            [
                ResnetBlock3d(channels, channels, eps, is_causal, inject_noise, conditioned)
                for _ in range(layers)
            ]
        )

    def embed(self, op, timestep, x):
        return None if self.time_embedder is None else self.time_embedder(op, timestep, x)

    def forward(self, op, x, timestep=None, noise: Iterator | None = None):
        temb = self.embed(op, timestep, x)
        for resnet in self.resnets:
            x = resnet(op, x, temb, noise)
        return x


class UpBlock3d(MidBlock3d):
    """``LTXVideoUpBlock3d``: (``conv_in``), ``upsamplers``, resnets (as the mid block's)."""

    def __init__(self, cin, cout, layers, eps, scale, is_causal, inject_noise, conditioned,
                 residual, factor):  # fmt: skip
        # (a timestep-conditioned or noisy block keeps its channels: see the config's checks)
        super().__init__(cout, layers, eps, is_causal, inject_noise, conditioned)
        self.conv_in = ResnetBlock3d(cin, cout, eps, is_causal) if cin != cout else None
        self.upsamplers = None
        if scale:
            self.upsamplers = nn.ModuleList(
                [Upsampler3d(cout * factor, is_causal, residual, factor)]
            )

    def forward(self, op, x, timestep=None, noise: Iterator | None = None):
        if self.conv_in is not None:
            x = self.conv_in(op, x)
        temb = self.embed(op, timestep, x)
        if self.upsamplers is not None:
            x = self.upsamplers[0](op, x)
        for resnet in self.resnets:
            x = resnet(op, x, temb, noise)
        return x
