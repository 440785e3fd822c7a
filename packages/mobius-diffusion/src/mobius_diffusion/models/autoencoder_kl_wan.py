"""AutoencoderKLWan: the causal 3-D VAE of Wan 2.1 and 2.2, over ``[batch, channels, frames, h, w]``.

Every 3-D conv is causal in time (``WanCausalConv3d``: zero frames in front, none
behind); norms are ``WanRMS_norm`` (each pixel's channel vector scaled to unit RMS,
times ``gamma``); the mid blocks attend over each frame's pixels with one head.
Down blocks halve space with a per-frame 3x3 conv (bottom/right padding), and the
temporal ones also halve time with ``time_conv`` (3 frames, stride 2); up blocks
mirror that: ``time_conv`` doubles the channels and the halves become two frames.

diffusers encodes the first frame alone, then chunks of 4 frames (frames past the
last whole chunk are dropped), and decodes one latent frame at a time, carrying
each conv's last input frames to the next chunk. The graphs compute that in one
pass: the carried causal convs are plain causal convs over the whole clip. What the
first chunk does on its own is reproduced: a temporal downsample passes the first
frame through and strides its ``time_conv`` from frame 0 on (chunks of 4 keep that
alignment); a temporal upsample passes the first frame through and runs its
``time_conv`` over the later frames as if the first were zeros (diffusers starts
that conv's cache there). Graphs (:class:`mobius.tasks.VAETask`): ``encoder/model``
``sample`` -> ``latent_parameters`` (``latent_dist.parameters``), ``decoder/model``
``latent_sample`` -> ``sample`` clamped to [-1, 1] as diffusers does; the graph decodes
its input whole (the runners tile spatially with ``--vae-tiling``: :mod:`mobius_diffusion.tiling`).

Wan 2.2's VAE (``is_residual``) adds to each down block the average of its input
over the block's downsampling (``AvgDown3D``: a zero frame in front of an even
clip, as diffusers' first one-frame chunk gets) and to each up block its input
repeated to the block's size (``DupUp3D``, its first repeated frame dropped as in
diffusers' first chunk); ``patch_size`` folds ``p x p`` pixels into the channels
before the encoder and back after the decoder.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv2d, Conv3d, bidirectional_attention
from mobius.errors import ConfigError
from mobius_diffusion.models.autoencoder_kl import AutoencoderKL
from mobius_diffusion.models.wan import positive_int

#: diffusers encodes the first frame, then chunks of this many frames (fixed in its code).
_ENCODE_CHUNK = 4


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


def _bool_list(name: str, value: Any) -> list[bool]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, bool) for v in value):
        raise ConfigError(f"AutoencoderKLWan: {name} must be a list of booleans, not {value!r}")
    return list(value)


def _positive_int(name: str, value: Any) -> int:
    return positive_int("AutoencoderKLWan", name, value)


@dataclass
class AutoencoderKLWanConfig:
    base_dim: int = 96
    decoder_base_dim: int | None = None
    z_dim: int = 16
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    attn_scales: tuple[float, ...] = ()  # refused unless empty
    temperal_downsample: tuple[bool, ...] = (False, True, True)
    in_channels: int = 3
    out_channels: int = 3
    is_residual: bool = False  # Wan 2.2
    patch_size: int | None = None  # Wan 2.2
    #: AutoencoderKL's names for what every Wan VAE has.
    use_quant_conv: bool = True
    use_post_quant_conv: bool = True

    @classmethod
    def from_hf(cls, config: Any) -> AutoencoderKLWanConfig:
        fields = ("base_dim", "decoder_base_dim", "z_dim", "num_res_blocks", "is_residual")
        fields += ("patch_size",)
        fields += ("in_channels", "out_channels", "dim_mult", "attn_scales", "temperal_downsample")
        c = cls(**{k: getattr(config, k) for k in fields if hasattr(config, k)})
        c.decoder_base_dim = c.decoder_base_dim or c.base_dim
        for name in ("base_dim", "decoder_base_dim", "z_dim", "num_res_blocks"):
            _positive_int(name, getattr(c, name))
        for name in ("in_channels", "out_channels"):
            _positive_int(name, getattr(c, name))
        if not isinstance(c.dim_mult, (list, tuple)) or not c.dim_mult:
            raise ConfigError(f"AutoencoderKLWan: dim_mult must be a list, not {c.dim_mult!r}")
        c.dim_mult = tuple(_positive_int("dim_mult", m) for m in c.dim_mult)
        if not isinstance(c.is_residual, bool):
            raise ConfigError(f"AutoencoderKLWan: is_residual must be a boolean: {c.is_residual!r}")
        if c.patch_size is not None:
            area = _positive_int("patch_size", c.patch_size) ** 2
            if c.in_channels % area or c.out_channels % area:
                raise ConfigError(
                    f"AutoencoderKLWan: in_channels and out_channels must be multiples of "
                    f"patch_size**2 ({area}): the patched pixels"
                )
        if c.attn_scales:  # diffusers' encoder passes its caches to them, which they refuse
            raise ConfigError("AutoencoderKLWan: attn_scales (encoder attention) is not built")
        temporal = _bool_list("temperal_downsample", c.temperal_downsample)
        if len(temporal) != len(c.dim_mult) - 1:
            raise ConfigError(
                f"AutoencoderKLWan: temperal_downsample has {len(temporal)} entries; "
                f"one per down block but the last ({len(c.dim_mult) - 1}) is built"
            )
        if 2 ** sum(temporal) > _ENCODE_CHUNK:  # diffusers' 4-frame chunks cannot be halved more
            raise ConfigError("AutoencoderKLWan: more than two temporal downsamples are not built")
        c.temperal_downsample = tuple(temporal)
        return c

    @property
    def latent_channels(self) -> int:
        return self.z_dim


class CausalConv3d(Conv3d):
    """``WanCausalConv3d``: ``2 * padding[0]`` zero frames in front, symmetric zero padding in space."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, padding=0) -> None:
        pad_t, pad_h, pad_w = [padding] * 3 if isinstance(padding, int) else padding
        super().__init__(in_channels, out_channels, kernel_size, padding=(0, pad_h, pad_w))
        self.front_frames = 2 * pad_t

    def forward(self, op, x):
        if self.front_frames:
            x = op.Pad(x, _ints(op, [0, 0, self.front_frames, 0, 0] + [0] * 5))
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

    def forward(self, op, x):
        shortcut = x if self.conv_shortcut is None else self.conv_shortcut(op, x)
        x = self.conv1(op, _silu(op, self.norm1(op, x)))
        x = self.conv2(op, _silu(op, self.norm2(op, x)))
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

    def forward(self, op, x):
        if self.mode == "upsample3d":
            x = self.upsample_time(op, x)
        if self.mode.startswith("upsample"):
            scales = op.Constant(value=ir.tensor([1.0, 1.0, 1.0, 2.0, 2.0], ir.DataType.FLOAT))
            nearest = dict(coordinate_transformation_mode="asymmetric", nearest_mode="floor")
            x = op.Resize(x, None, scales, mode="nearest", **nearest)  # = nearest-exact at 2x
        x = self.resample[1](op, x)
        return self.downsample_time(op, x) if self.mode == "downsample3d" else x

    def upsample_time(self, op, x):
        """Frame 0 as it is; every later frame -> two frames from ``time_conv``'s channel halves."""
        first = _frames(op, x, 0, 1)
        later = _frames(op, x, 1, 2**62)
        zeros = op.Expand(op.CastLike(0.0, x), op.Shape(first))
        doubled = self.time_conv(op, op.Concat(zeros, later, axis=2))  # [b, 2c, t, h, w]
        b, c, t, h, w = _sizes(op, x)
        halves = op.Reshape(doubled, op.Concat(b, _ints(op, [2]), c, t, h, w, axis=0))
        pairs = op.Transpose(halves, perm=[0, 2, 3, 1, 4, 5])  # [b, c, t, 2, h, w]
        twice = op.Mul(t, _ints(op, [2]))
        sequence = op.Reshape(pairs, op.Concat(b, c, twice, h, w, axis=0))
        return op.Concat(first, _frames(op, sequence, 2, 2**62), axis=2)  # frame 0's pair dropped

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
    blocks; the first ``factor_t - 1`` frames dropped (diffusers' first chunk)."""

    def __init__(self, in_channels: int, out_channels: int, factor_t: int, factor_s: int) -> None:
        super().__init__()
        self.factor_t, self.factor_s, self.out_channels = factor_t, factor_s, out_channels
        self.repeats = _whole_ratio(out_channels * factor_t * factor_s * factor_s, in_channels)

    def forward(self, op, x):
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
        return _frames(op, x, ft - 1, 2**62) if ft > 1 else x


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

    def forward(self, op, x):
        x = self.resnets[0](op, x)
        return self.resnets[1](op, self.attentions[0](op, x))


class Encoder3d(nn.Module):
    """``WanEncoder3d``: ``conv_in``, a flat ``down_blocks`` list, ``mid_block``, ``norm_out``, ``conv_out``."""

    def __init__(self, c: AutoencoderKLWanConfig) -> None:
        super().__init__()
        dims = [c.base_dim * m for m in (1, *c.dim_mult)]
        self.conv_in = CausalConv3d(c.in_channels, dims[0], 3, padding=1)
        layers = []
        for i, (in_dim, out_dim) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
            last = i == len(c.dim_mult) - 1
            if c.is_residual:  # Wan 2.2: one block per level
                temporal = c.temperal_downsample[i] if not last else False
                layers.append(
                    ResidualDownBlock(in_dim, out_dim, c.num_res_blocks, temporal, not last)
                )
                continue
            for _ in range(c.num_res_blocks):
                layers.append(ResidualBlock(in_dim, out_dim))
                in_dim = out_dim
            if not last:
                mode = "downsample3d" if c.temperal_downsample[i] else "downsample2d"
                layers.append(Resample(out_dim, mode))
        self.down_blocks = nn.ModuleList(layers)
        self.mid_block = MidBlock(dims[-1])
        self.norm_out = RMSNorm(dims[-1])
        self.conv_out = CausalConv3d(dims[-1], 2 * c.z_dim, 3, padding=1)

    def forward(self, op, x):
        x = self.conv_in(op, x)
        for layer in self.down_blocks:
            x = layer(op, x)
        x = self.mid_block(op, x)
        return self.conv_out(op, _silu(op, self.norm_out(op, x)))


class UpBlock(nn.Module):
    """``WanUpBlock``: ``num_res_blocks + 1`` resnets, then an optional ``upsamplers.0``."""

    def __init__(self, in_dim: int, out_dim: int, num_res_blocks: int, mode: str | None) -> None:
        super().__init__()
        dims = [in_dim] + [out_dim] * (num_res_blocks + 1)
        self.resnets = nn.ModuleList(
            [ResidualBlock(a, b) for a, b in zip(dims[:-1], dims[1:], strict=True)]
        )
        self.upsamplers = nn.ModuleList([Resample(out_dim, mode)]) if mode else None

    def forward(self, op, x):
        for resnet in self.resnets:
            x = resnet(op, x)
        return x if self.upsamplers is None else self.upsamplers[0](op, x)


class ResidualUpBlock(UpBlock):
    """``WanResidualUpBlock`` (Wan 2.2): an ``UpBlock`` whose upsampler keeps the width, plus
    ``avg_shortcut`` (the input repeated to the output's size)."""

    def __init__(self, in_dim, out_dim, num_res_blocks: int, temporal: bool, up: bool) -> None:
        super().__init__(in_dim, out_dim, num_res_blocks, None)
        self.avg_shortcut = DupUp3D(in_dim, out_dim, 2 if temporal else 1, 2) if up else None
        mode = "upsample3d" if temporal else "upsample2d"
        self.upsampler = Resample(out_dim, mode, upsample_out_dim=out_dim) if up else None

    def forward(self, op, x):
        out = super().forward(op, x)
        if self.upsampler is not None:
            out = self.upsampler(op, out)
        return out if self.avg_shortcut is None else op.Add(out, self.avg_shortcut(op, x))


class Decoder3d(nn.Module):
    """``WanDecoder3d``: ``conv_in``, ``mid_block``, ``up_blocks``, ``norm_out``, ``conv_out``."""

    def __init__(self, c: AutoencoderKLWanConfig) -> None:
        super().__init__()
        mult = c.dim_mult
        dims = [c.decoder_base_dim * m for m in (mult[-1], *mult[::-1])]
        upsample_time = c.temperal_downsample[::-1]
        self.conv_in = CausalConv3d(c.z_dim, dims[0], 3, padding=1)
        self.mid_block = MidBlock(dims[0])
        blocks = []
        for i, (in_dim, out_dim) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
            up = i != len(mult) - 1
            if c.is_residual:  # Wan 2.2
                temporal = upsample_time[i] if up else False
                blocks.append(ResidualUpBlock(in_dim, out_dim, c.num_res_blocks, temporal, up))
                continue
            in_dim = in_dim // 2 if i > 0 else in_dim  # each upsample halved the width
            mode = None
            if up:
                mode = "upsample3d" if upsample_time[i] else "upsample2d"
            blocks.append(UpBlock(in_dim, out_dim, c.num_res_blocks, mode))
        self.up_blocks = nn.ModuleList(blocks)
        self.norm_out = RMSNorm(dims[-1])
        self.conv_out = CausalConv3d(dims[-1], c.out_channels, 3, padding=1)

    def forward(self, op, x):
        x = self.mid_block(op, self.conv_in(op, x))
        for block in self.up_blocks:
            x = block(op, x)
        return self.conv_out(op, _silu(op, self.norm_out(op, x)))


class AutoencoderKLWan(AutoencoderKL):
    """diffusers' ``AutoencoderKLWan`` (Wan 2.1): ``encoder/model`` and ``decoder/model`` over video."""

    config_class = AutoencoderKLWanConfig
    encoder_class, decoder_class, conv_class = Encoder3d, Decoder3d, Conv3d
    sample_axes = ("frames", "height", "width")
    latent_axes = ("latent_frames", "latent_height", "latent_width")

    def encode(self, op, sample):
        """Frames past ``1 + 4k`` are dropped, as diffusers' chunking drops them."""
        frames = op.Shape(sample, start=2, end=3)
        chunks = op.Div(op.Sub(frames, _ints(op, [1])), _ints(op, [_ENCODE_CHUNK]))
        kept = op.Add(op.Mul(chunks, _ints(op, [_ENCODE_CHUNK])), _ints(op, [1]))
        return super().encode(op, self.patchify(op, _frames(op, sample, 0, kept)))

    def decode(self, op, latent_sample):
        sample = self.unpatchify(op, super().decode(op, latent_sample))
        low, high = op.CastLike(-1.0, sample), op.CastLike(1.0, sample)
        return op.Clip(sample, low, high)

    def patchify(self, op, x):
        """``[b, c, t, H, W]`` -> ``[b, c * p * p, t, H/p, W/p]``, channels ordered (c, column, row)."""
        p = self.config.patch_size
        if not p:
            return x
        b, c, t, h, w = _sizes(op, x)
        rows, columns = op.Div(h, _ints(op, [p])), op.Div(w, _ints(op, [p]))
        x = op.Reshape(x, op.Concat(b, c, t, rows, _ints(op, [p]), columns, _ints(op, [p]), axis=0))
        x = op.Transpose(x, perm=[0, 1, 6, 4, 2, 3, 5])
        return op.Reshape(x, op.Concat(b, _ints(op, [-1]), t, rows, columns, axis=0))

    def unpatchify(self, op, x):
        """The inverse of :meth:`patchify`."""
        p = self.config.patch_size
        if not p:
            return x
        b, _, t, h, w = _sizes(op, x)
        x = op.Reshape(x, op.Concat(b, _ints(op, [-1, p, p]), t, h, w, axis=0))
        x = op.Transpose(x, perm=[0, 1, 4, 5, 3, 6, 2])  # [b, c, t, h, p (row), w, p (column)]
        size = [op.Mul(h, _ints(op, [p])), op.Mul(w, _ints(op, [p]))]
        return op.Reshape(x, op.Concat(b, _ints(op, [-1]), t, *size, axis=0))

    def graph_specs(self):
        specs = super().graph_specs()
        p = self.config.patch_size
        if p:  # the config's channels are the patched ones; the graphs take and give pixels
            sample = ["batch", self.config.in_channels // (p * p), *self.sample_axes]
            specs["encoder/model"].inputs["sample"] = (None, sample)
            decoded = ["batch", self.config.out_channels // (p * p), *self.sample_axes]
            specs["decoder/model"].outputs["sample"] = decoded
        return specs


MODEL_TYPES = {"AutoencoderKLWan": AutoencoderKLWan}
