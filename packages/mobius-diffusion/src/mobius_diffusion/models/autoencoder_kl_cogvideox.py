"""AutoencoderKLCogVideoX: the causal 3-D VAE of CogVideoX, over ``[batch, channels, frames, h, w]``.

Every 3-D conv is causal in time (``CogVideoXCausalConv3d``: the first frame is
repeated ``kernel_t - 1`` times in front). Down blocks halve space with a 2-D conv
per frame and, in the first ``log2(temporal_compression_ratio)`` blocks, average
frame pairs first (a chunk of odd length keeps its first frame alone); up blocks
mirror that with nearest repeats. The decoder's norms are ``CogVideoXSpatialNorm3D``:
a GroupNorm scaled and shifted by 1x1x1 convs of the latent, repeated to the size.

diffusers runs the encoder on chunks of 8 frames and the decoder on chunks of 2
latent frames (the first chunk also takes the remainder), carrying each causal
conv's last input frames to the next chunk. The graphs compute that in one pass:
the carried convs are plain causal convs over the whole clip, while what each
chunk does on its own (GroupNorm statistics, the first-frame rule of the time
pooling and repeats) follows the chunk layout, computed from the frame count
(:class:`_Frames`). Graphs (:class:`mobius.tasks.VAETask`): ``encoder/model``
``sample`` -> ``latent_parameters`` (``latent_dist.parameters``), ``decoder/model``
``latent_sample`` -> ``sample``; tiling and slicing are off, as by default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv2d, Conv3d, GroupNorm
from mobius.errors import ConfigError
from mobius_diffusion.models._resnet import activation
from mobius_diffusion.models.autoencoder_kl import AutoencoderKL

#: diffusers' ``num_sample_frames_batch_size`` and ``num_latent_frames_batch_size`` (fixed in code).
_SAMPLE_CHUNK, _LATENT_CHUNK = 8, 2
_EPS = 1e-6  # the encoder's norm_out and every spatial norm fix their epsilon


def _ints(op, values):
    return op.Constant(value_ints=list(values))


class _Frames:
    """The chunks diffusers cuts a clip into at one resolution: ``first`` frames, then chunks of ``size``.

    ``first`` and ``count`` are int64 ``[1]`` values; ``size`` is static. ``source``
    (decoder) maps each frame to the latent frame it was repeated from, and
    ``scale`` is the spatial upscale since the latent.
    """

    def __init__(self, op, first, size: int, count, source=None, scale: int = 1) -> None:
        self.op, self.first, self.size, self.count = op, first, size, count
        self.source, self.scale = source, scale
        self._mean = None

    @classmethod
    def of(cls, op, x, size: int, with_source: bool = False) -> _Frames:
        """diffusers' batching of ``x``'s frames: chunks of ``size``, the remainder in the first."""
        count = op.Shape(x, start=2, end=3)
        first = op.Min(op.Add(op.Mod(count, _ints(op, [size])), _ints(op, [size])), count)
        frames = cls(op, first, size, count)
        frames.source = frames.positions() if with_source else None
        return frames

    def positions(self):
        op = self.op
        return op.Range(op.Constant(value_int=0), op.Squeeze(self.count), op.Constant(value_int=1))

    def locate(self, q):
        """Chunk index and position in the chunk of frames ``q`` (int64 ``[n]``)."""
        op = self.op
        size = _ints(op, [self.size])
        in_first = op.Less(q, self.first)
        rest = op.Max(op.Sub(q, self.first), _ints(op, [0]))
        zero = _ints(op, [0])
        chunk = op.Where(in_first, zero, op.Add(op.Div(rest, size), _ints(op, [1])))
        return chunk, op.Where(in_first, q, op.Mod(rest, size))

    def chunk_span(self, chunk):
        """Start frame and length of chunks ``chunk``."""
        op = self.op
        size = _ints(op, [self.size])
        first_chunk = op.Equal(chunk, _ints(op, [0]))
        start = op.Add(self.first, op.Mul(op.Sub(chunk, _ints(op, [1])), size))
        return op.Where(first_chunk, _ints(op, [0]), start), op.Where(first_chunk, self.first, size)

    def mean_matrix(self):
        """``[frames, frames]``: row ``t`` averages over the frames of ``t``'s chunk (float32)."""
        if self._mean is None:
            op = self.op
            chunk, _ = self.locate(self.positions())
            same = op.Cast(
                op.Equal(op.Unsqueeze(chunk, _ints(op, [1])), op.Unsqueeze(chunk, _ints(op, [0]))),
                to=ir.DataType.FLOAT,
            )
            self._mean = op.Div(same, op.ReduceSum(same, _ints(op, [1]), keepdims=1))
        return self._mean

    def _resized(self, first, size: int):
        op = self.op
        chunks = op.Div(op.Sub(self.count, self.first), _ints(op, [self.size]))
        count = op.Add(first, op.Mul(chunks, _ints(op, [size])))
        return _Frames(op, first, size, count, self.source, self.scale)

    def pooled(self):
        """``(frames after CogVideoXDownsample3D's pair averaging, (a, b))``: output = mean of frames a and b."""
        op = self.op
        two = _ints(op, [2])
        out = self._resized(op.Div(op.Add(self.first, _ints(op, [1])), two), (self.size + 1) // 2)
        chunk, pos = out.locate(out.positions())
        start, length = self.chunk_span(chunk)
        odd = op.Mod(length, two)  # an odd chunk keeps its first frame alone
        twice = op.Mul(pos, two)
        a = op.Add(start, op.Max(op.Sub(twice, odd), _ints(op, [0])))
        b = op.Add(start, op.Sub(op.Add(twice, _ints(op, [1])), odd))
        return out, (a, b)

    def repeated(self):
        """``(frames after CogVideoXUpsample3D's nearest 2x in time, source frame of each)``."""
        op = self.op
        two = _ints(op, [2])
        first = op.Sub(op.Mul(self.first, two), op.Mod(self.first, two))
        out = self._resized(first, 2 * self.size - self.size % 2)
        chunk, pos = out.locate(out.positions())
        start, length = self.chunk_span(chunk)
        src = op.Add(start, op.Div(op.Add(pos, op.Mod(length, two)), two))
        if self.source is not None:
            out.source = op.Gather(self.source, src)
        return out, src


def _resize_spatial(op, x, factor: int):
    """Nearest ``factor``x over height and width of ``[b, c, t, h, w]``."""
    if factor == 1:
        return x
    scales = op.Constant(
        value=ir.tensor([1.0, 1.0, 1.0, float(factor), float(factor)], ir.DataType.FLOAT)
    )
    attrs = dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    return op.Resize(x, None, scales, **attrs)


class FrameConv2d(Conv2d):
    """A checkpoint's 2-D conv run on every frame of ``[b, c, t, h, w]`` (a 1 x k x k 3-D conv)."""

    def __init__(self, channels: int, stride: int, pads: tuple[int, int]) -> None:
        super().__init__(channels, channels, 3, stride=stride)
        top_left, bottom_right = pads
        self.attrs = dict(
            kernel_shape=[1, 3, 3],
            strides=[1, stride, stride],
            pads=[0, top_left, top_left, 0, bottom_right, bottom_right],
        )

    def forward(self, op, x):
        weight = op.Unsqueeze(self.weight, _ints(op, [2]))  # [o, i, 1, k, k]
        return op.Conv(x, weight, self.bias, **self.attrs)


class ChunkGroupNorm(GroupNorm):
    """GroupNorm over ``[b, c, t, h, w]`` whose statistics span each chunk's frames, as diffusers' batching gives."""

    def __init__(self, num_groups: int, num_channels: int, eps: float) -> None:
        super().__init__(num_groups, num_channels, eps, spatial_dims=3)

    def forward(self, op, x, frames: _Frames):
        mean_matrix = op.CastLike(frames.mean_matrix(), x)
        frame_major = op.Transpose(x, perm=[0, 2, 1, 3, 4])  # [b, t, c, h, w]
        grouped = op.Reshape(frame_major, _ints(op, [0, 0, self.num_groups, -1]))  # [b, t, g, rest]
        axis = _ints(op, [3])
        mean = op.MatMul(mean_matrix, op.ReduceMean(grouped, axis, keepdims=0))  # [b, t, g]
        centred = op.Sub(grouped, op.Unsqueeze(mean, axis))
        var = op.MatMul(mean_matrix, op.ReduceMean(op.Mul(centred, centred), axis, keepdims=0))
        normed = op.Div(centred, op.Sqrt(op.Add(op.Unsqueeze(var, axis), op.CastLike(self.eps, x))))
        y = op.Transpose(op.Reshape(normed, op.Shape(frame_major)), perm=[0, 2, 1, 3, 4])
        per_channel = _ints(op, [-1, 1, 1, 1])
        return op.Add(
            op.Mul(y, op.Reshape(self.weight, per_channel)), op.Reshape(self.bias, per_channel)
        )


class CausalConv3d(nn.Module):
    """``CogVideoXCausalConv3d``: the first frame repeated ``k - 1`` times in front, zero padding in space."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int) -> None:
        super().__init__()
        self.time_pad = kernel_size - 1
        pad = (kernel_size - 1) // 2
        self.conv = Conv3d(in_channels, out_channels, kernel_size, padding=(0, pad, pad))

    def forward(self, op, x):
        if self.time_pad:
            first = op.Slice(x, _ints(op, [0]), _ints(op, [1]), _ints(op, [2]))
            x = op.Concat(*[first] * self.time_pad, x, axis=2)
        return self.conv(op, x)


class SpatialNorm3D(nn.Module):
    """``CogVideoXSpatialNorm3D``: ``norm_layer(f) * conv_y(zq) + conv_b(zq)``, ``zq`` the latent at ``f``'s size."""

    def __init__(self, f_channels: int, zq_channels: int, groups: int) -> None:
        super().__init__()
        self.norm_layer = ChunkGroupNorm(groups, f_channels, _EPS)
        self.conv_y = CausalConv3d(zq_channels, f_channels, 1)
        self.conv_b = CausalConv3d(zq_channels, f_channels, 1)

    def forward(self, op, f, frames: _Frames, zq):
        normed = self.norm_layer(op, f, frames)
        return op.Add(op.Mul(normed, self.conv_y(op, zq)), self.conv_b(op, zq))


class ResnetBlock3D(nn.Module):
    """``CogVideoXResnetBlock3D`` (no time embedding): norm, act, causal conv, twice, plus the shortcut."""

    def __init__(
        self, in_channels, out_channels, groups, eps, act_fn, spatial_norm_dim=None
    ) -> None:
        super().__init__()
        self.act = activation(act_fn)
        if spatial_norm_dim is None:
            self.norm1 = ChunkGroupNorm(groups, in_channels, eps)
            self.norm2 = ChunkGroupNorm(groups, out_channels, eps)
        else:
            self.norm1 = SpatialNorm3D(in_channels, spatial_norm_dim, groups)
            self.norm2 = SpatialNorm3D(out_channels, spatial_norm_dim, groups)
        self.conv1 = CausalConv3d(in_channels, out_channels, 3)
        self.conv2 = CausalConv3d(out_channels, out_channels, 3)
        self.conv_shortcut = (
            Conv3d(in_channels, out_channels, 1) if in_channels != out_channels else None
        )

    def forward(self, op, x, frames: _Frames, zq=None):
        extra = () if zq is None else (zq,)
        h = self.conv1(op, self.act(op, self.norm1(op, x, frames, *extra)))
        h = self.conv2(op, self.act(op, self.norm2(op, h, frames, *extra)))
        return op.Add(h, x if self.conv_shortcut is None else self.conv_shortcut(op, x))


class Downsample3D(nn.Module):
    """``CogVideoXDownsample3D``: optional pair-averaging in time, then a stride-2 3x3 ``conv`` per frame."""

    def __init__(self, channels: int, compress_time: bool) -> None:
        super().__init__()
        self.compress_time = compress_time
        self.conv = FrameConv2d(channels, 2, (0, 1))  # diffusers pads bottom and right by 1

    def forward(self, op, x, frames: _Frames):
        if self.compress_time:
            frames, (a, b) = frames.pooled()
            pair = op.Add(op.Gather(x, a, axis=2), op.Gather(x, b, axis=2))
            x = op.Mul(pair, op.CastLike(0.5, x))
        return self.conv(op, x), frames


class Upsample3D(nn.Module):
    """``CogVideoXUpsample3D``: nearest 2x in space (and in time, but a chunk's odd first frame), 3x3 ``conv``."""

    def __init__(self, channels: int, compress_time: bool) -> None:
        super().__init__()
        self.compress_time = compress_time
        self.conv = FrameConv2d(channels, 1, (1, 1))

    def forward(self, op, x, frames: _Frames):
        if self.compress_time:
            frames, source = frames.repeated()
            x = op.Gather(x, source, axis=2)
        frames = _Frames(
            op, frames.first, frames.size, frames.count, frames.source, frames.scale * 2
        )
        x = _resize_spatial(op, x, 2)
        return self.conv(op, x), frames


def resnet_stack(in_channels, out_channels, num_layers, c, spatial_norm_dim=None) -> nn.ModuleList:
    """A block's ``resnets``: the first from ``in_channels``, all to ``out_channels``."""
    return nn.ModuleList(
        [
            ResnetBlock3D(
                in_channels if i == 0 else out_channels,
                out_channels,
                c.norm_num_groups,
                c.norm_eps,
                c.act_fn,
                spatial_norm_dim,
            )
            for i in range(num_layers)
        ]
    )


class DownBlock3D(nn.Module):
    def __init__(
        self, in_channels, out_channels, num_layers, c, add_downsample, compress_time
    ) -> None:
        super().__init__()
        self.resnets = resnet_stack(in_channels, out_channels, num_layers, c)
        self.downsamplers = (
            nn.ModuleList([Downsample3D(out_channels, compress_time)]) if add_downsample else None
        )

    def forward(self, op, x, frames: _Frames):
        for resnet in self.resnets:
            x = resnet(op, x, frames)
        if self.downsamplers is not None:
            x, frames = self.downsamplers[0](op, x, frames)
        return x, frames


class UpBlock3D(nn.Module):
    def __init__(
        self, in_channels, out_channels, num_layers, c, add_upsample, compress_time
    ) -> None:
        super().__init__()
        self.resnets = resnet_stack(in_channels, out_channels, num_layers, c, c.latent_channels)
        self.upsamplers = (
            nn.ModuleList([Upsample3D(out_channels, compress_time)]) if add_upsample else None
        )

    def forward(self, op, x, frames: _Frames, zq):
        for resnet in self.resnets:
            x = resnet(op, x, frames, zq)
        if self.upsamplers is not None:
            x, frames = self.upsamplers[0](op, x, frames)
        return x, frames


class MidBlock3D(nn.Module):
    def __init__(self, channels, c, spatial_norm_dim=None) -> None:
        super().__init__()
        self.resnets = resnet_stack(channels, channels, 2, c, spatial_norm_dim)

    def forward(self, op, x, frames: _Frames, zq=None):
        for resnet in self.resnets:
            x = resnet(op, x, frames, zq)
        return x


@dataclass
class AutoencoderKLCogVideoXConfig:
    in_channels: int = 3
    out_channels: int = 3
    block_out_channels: tuple[int, ...] = (128, 256, 256, 512)
    latent_channels: int = 16
    layers_per_block: int = 3
    act_fn: str = "silu"
    norm_eps: float = 1e-6
    norm_num_groups: int = 32
    temporal_compression_ratio: float = 4
    use_quant_conv: bool = False
    use_post_quant_conv: bool = False

    @classmethod
    def from_hf(cls, config: Any) -> AutoencoderKLCogVideoXConfig:
        widths = tuple(config.block_out_channels)
        for key, kind in (
            ("down_block_types", "CogVideoXDownBlock3D"),
            ("up_block_types", "CogVideoXUpBlock3D"),
        ):
            types = list(getattr(config, key, [kind] * len(widths)))
            if set(types) != {kind} or len(types) != len(widths):
                raise ConfigError(
                    f"AutoencoderKLCogVideoX {key} {types}: mobius builds one {kind} per width"
                )
        c = cls(
            in_channels=getattr(config, "in_channels", 3),
            out_channels=getattr(config, "out_channels", 3),
            block_out_channels=widths,
            latent_channels=getattr(config, "latent_channels", 16),
            layers_per_block=getattr(config, "layers_per_block", 3),
            act_fn=getattr(config, "act_fn", "silu"),
            norm_eps=getattr(config, "norm_eps", 1e-6),
            norm_num_groups=getattr(config, "norm_num_groups", 32),
            temporal_compression_ratio=getattr(config, "temporal_compression_ratio", 4),
            use_quant_conv=getattr(config, "use_quant_conv", False),
            use_post_quant_conv=getattr(config, "use_post_quant_conv", False),
        )
        activation(c.act_fn)
        if (c.use_quant_conv or c.use_post_quant_conv) and c.out_channels != c.latent_channels:
            # diffusers sizes these convs by out_channels, so its own model cannot run them
            raise ConfigError(
                "AutoencoderKLCogVideoX quant convs need out_channels == latent_channels"
            )
        return c

    @property
    def time_levels(self) -> int:
        """How many down (and up) blocks compress time."""
        return int(math.log2(self.temporal_compression_ratio))


class Encoder3D(nn.Module):
    def __init__(self, c: AutoencoderKLCogVideoXConfig) -> None:
        super().__init__()
        widths = c.block_out_channels
        self.conv_in = CausalConv3d(c.in_channels, widths[0], 3)
        self.down_blocks = nn.ModuleList(
            [
                DownBlock3D(
                    widths[max(i - 1, 0)],
                    width,
                    c.layers_per_block,
                    c,
                    i < len(widths) - 1,
                    i < c.time_levels,
                )
                for i, width in enumerate(widths)
            ]
        )
        self.mid_block = MidBlock3D(widths[-1], c)
        self.norm_out = ChunkGroupNorm(c.norm_num_groups, widths[-1], _EPS)
        self.conv_out = CausalConv3d(widths[-1], 2 * c.latent_channels, 3)

    def forward(self, op, sample):
        frames = _Frames.of(op, sample, _SAMPLE_CHUNK)
        x = self.conv_in(op, sample)
        for block in self.down_blocks:
            x, frames = block(op, x, frames)
        x = self.mid_block(op, x, frames)
        x = self.norm_out(op, x, frames)
        return self.conv_out(op, op.Mul(x, op.Sigmoid(x)))  # conv_act is nn.SiLU


class Decoder3D(nn.Module):
    def __init__(self, c: AutoencoderKLCogVideoXConfig) -> None:
        super().__init__()
        widths = list(reversed(c.block_out_channels))
        self.conv_in = CausalConv3d(c.latent_channels, widths[0], 3)
        self.mid_block = MidBlock3D(widths[0], c, spatial_norm_dim=c.latent_channels)
        self.up_blocks = nn.ModuleList(
            [
                UpBlock3D(
                    widths[max(i - 1, 0)],
                    width,
                    c.layers_per_block + 1,
                    c,
                    i < len(widths) - 1,
                    i < c.time_levels,
                )
                for i, width in enumerate(widths)
            ]
        )
        self.norm_out = SpatialNorm3D(widths[-1], c.latent_channels, c.norm_num_groups)
        self.conv_out = CausalConv3d(widths[-1], c.out_channels, 3)

    @staticmethod
    def latent_at(op, z, frames: _Frames):
        """The latent repeated to ``frames``' size, as each spatial norm interpolates it."""
        return _resize_spatial(op, op.Gather(z, frames.source, axis=2), frames.scale)

    def forward(self, op, z):
        frames = _Frames.of(op, z, _LATENT_CHUNK, with_source=True)
        x = self.mid_block(op, self.conv_in(op, z), frames, z)
        for block in self.up_blocks:
            x, frames = block(op, x, frames, self.latent_at(op, z, frames))
        x = self.norm_out(op, x, frames, self.latent_at(op, z, frames))
        return self.conv_out(op, op.Mul(x, op.Sigmoid(x)))


class AutoencoderKLCogVideoX(AutoencoderKL):
    """diffusers' ``AutoencoderKLCogVideoX``: ``encoder/model`` and ``decoder/model`` over video."""

    config_class = AutoencoderKLCogVideoXConfig
    encoder_class, decoder_class, conv_class = Encoder3D, Decoder3D, Conv3d
    sample_axes = ("frames", "height", "width")
    latent_axes = ("latent_frames", "latent_height", "latent_width")


MODEL_TYPES = {"AutoencoderKLCogVideoX": AutoencoderKLCogVideoX}
