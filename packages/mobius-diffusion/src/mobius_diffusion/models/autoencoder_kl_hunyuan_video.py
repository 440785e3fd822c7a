"""AutoencoderKLHunyuanVideo: HunyuanVideo's causal 3-D VAE, over ``[batch, channels, frames, h, w]``.

Every conv is a ``HunyuanVideoCausalConv3d``: the input edge-padded (replicated) by
``k - 1`` frames in front and ``k // 2`` pixels on each side, then a plain 3-D conv.
Resnets are GroupNorm, SiLU, causal conv, twice, plus a causal 1x1x1 shortcut when the
width changes. Down blocks end in a strided causal conv: 2 in space in the first
``log2(spatial_compression_ratio)`` blocks, 2 in time in the two blocks before the last
(``temporal_compression_ratio`` 4); up blocks mirror that with nearest repeats, the
first frame repeated in space only. The mid-block's attention (one head over all
channels, GroupNorm first, the input added back) is causal by frame: a pixel sees the
pixels of its own frame and of the frames before it.

Graphs (:class:`mobius.tasks.VAETask`): ``encoder/model`` ``sample`` ->
``latent_parameters`` (``latent_dist.parameters``), ``decoder/model`` ``latent_sample``
-> ``sample``, each one pass over the whole clip. diffusers cuts a clip of more than
16 frames (4 latent frames) into overlapping tiles in time and blends them
(``use_framewise_encoding``/``_decoding``, on by default): the text-to-video runner does
that around the decoder graph (:mod:`mobius_diffusion.pipelines.hunyuan_video`); the
encoder graph equals diffusers' ``encode`` up to 16 frames.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv3d, GroupNorm
from mobius.errors import ConfigError
from mobius_diffusion.models._checks import config_int, config_ints
from mobius_diffusion.models._resnet import AttentionBlock, activation
from mobius_diffusion.models.autoencoder_kl import AutoencoderKL

_EPS = 1e-6  # diffusers fixes every norm's epsilon
_DOWN, _UP = "HunyuanVideoDownBlock3D", "HunyuanVideoUpBlock3D"


def _ints(op, values):
    return op.Constant(value_ints=list(values))


@dataclass
class AutoencoderKLHunyuanVideoConfig:
    in_channels: int = 3
    out_channels: int = 3
    latent_channels: int = 16
    block_out_channels: tuple[int, ...] = (128, 256, 512, 512)
    layers_per_block: int = 2
    act_fn: str = "silu"
    norm_num_groups: int = 32
    spatial_compression_ratio: int = 8
    temporal_compression_ratio: int = 4
    mid_block_add_attention: bool = True
    use_quant_conv: bool = True  # always: AutoencoderKL's fields
    use_post_quant_conv: bool = True

    @classmethod
    def from_hf(cls, config: Any) -> AutoencoderKLHunyuanVideoConfig:
        name = config.model_type
        widths = config_ints(config, "block_out_channels", (128, 256, 512, 512))
        for key, kind in (("down_block_types", _DOWN), ("up_block_types", _UP)):
            types = list(getattr(config, key, [kind] * len(widths)))
            if set(types) != {kind} or len(types) != len(widths):
                raise ConfigError(f"{name} {key} {types}: mobius builds one {kind} per width")
        groups = config_int(config, "norm_num_groups", 32)
        if any(w % groups for w in widths):
            raise ConfigError(f"{name} norm_num_groups {groups} must divide every width {widths}")
        spatial = config_int(config, "spatial_compression_ratio", 8)
        if spatial & (spatial - 1):
            raise ConfigError(f"{name} spatial_compression_ratio {spatial} is not a power of 2")
        if config_int(config, "temporal_compression_ratio", 4) != 4:
            raise ConfigError(f"{name} temporal_compression_ratio must be 4 (diffusers' decoder)")
        attention = getattr(config, "mid_block_add_attention", True)
        if not isinstance(attention, bool):
            raise ConfigError(f"{name} mid_block_add_attention must be a boolean: {attention!r}")
        act_fn = getattr(config, "act_fn", "silu")
        activation(act_fn)
        return cls(
            in_channels=config_int(config, "in_channels", 3),
            out_channels=config_int(config, "out_channels", 3),
            latent_channels=config_int(config, "latent_channels", 16),
            block_out_channels=widths,
            layers_per_block=config_int(config, "layers_per_block", 2),
            act_fn=act_fn,
            norm_num_groups=groups,
            spatial_compression_ratio=spatial,
            mid_block_add_attention=attention,
        )

    def factors(self, i: int) -> tuple[int, int]:
        """``(time, space)`` scale of down block ``i`` (up block ``i`` counts from the latent)."""
        last = i == len(self.block_out_channels) - 1
        space = 2 if i < int(math.log2(self.spatial_compression_ratio)) else 1
        time_levels = int(math.log2(self.temporal_compression_ratio))
        time = 2 if i >= len(self.block_out_channels) - 1 - time_levels and not last else 1
        return time, space


class CausalConv3d(nn.Module):
    """``HunyuanVideoCausalConv3d``: replicate-pad ``k - 1`` frames in front, ``k // 2`` around, conv."""

    def __init__(self, in_channels, out_channels, kernel_size: int, stride=1) -> None:
        super().__init__()
        k = kernel_size
        self.pads = [0, 0, k - 1, k // 2, k // 2, 0, 0, 0, k // 2, k // 2]
        self.conv = Conv3d(in_channels, out_channels, k, stride=stride)

    def forward(self, op, x):
        if any(self.pads):
            x = op.Pad(x, _ints(op, self.pads), mode="edge")
        return self.conv(op, x)


class ResnetBlockCausal3D(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, c) -> None:
        super().__init__()
        self.act = activation(c.act_fn)
        self.norm1 = GroupNorm(c.norm_num_groups, in_channels, _EPS, spatial_dims=3)
        self.conv1 = CausalConv3d(in_channels, out_channels, 3)
        self.norm2 = GroupNorm(c.norm_num_groups, out_channels, _EPS, spatial_dims=3)
        self.conv2 = CausalConv3d(out_channels, out_channels, 3)
        self.conv_shortcut = (
            CausalConv3d(in_channels, out_channels, 1) if in_channels != out_channels else None
        )

    def forward(self, op, x):
        h = self.conv1(op, self.act(op, self.norm1(op, x)))
        h = self.conv2(op, self.act(op, self.norm2(op, h)))
        return op.Add(h, x if self.conv_shortcut is None else self.conv_shortcut(op, x))


class CausalAttentionBlock(AttentionBlock):
    """The VAE's attention over the pixels of ``[b, c, t, h, w]``, a frame seeing only itself and before."""

    def __init__(self, channels: int, groups: int) -> None:
        super().__init__(channels, channels, groups, _EPS)  # one head over all channels
        self.group_norm = GroupNorm(groups, channels, _EPS, spatial_dims=3)

    def forward(self, op, x, context=None):
        tokens = op.Transpose(
            op.Reshape(self.group_norm(op, x), _ints(op, [0, 0, -1])), perm=[0, 2, 1]
        )  # [b, t*h*w, c], frame-major
        pixels = op.ReduceProd(op.Shape(x, start=3), keepdims=1)  # h*w
        count = op.Squeeze(op.Mul(op.Shape(x, start=2, end=3), pixels))
        frame = op.Div(op.Range(op.Constant(value_int=0), count, op.Constant(value_int=1)), pixels)
        seen = op.LessOrEqual(op.Unsqueeze(frame, [0]), op.Unsqueeze(frame, [1]))  # [q, k]
        zero = op.CastLike(op.Constant(value_float=0.0), x)
        bias = op.Where(seen, zero, op.CastLike(op.Constant(value_float=float("-inf")), x))
        q, k, v = self.to_q(op, tokens), self.to_k(op, tokens), self.to_v(op, tokens)
        out = self.to_out[0](op, self.attend(op, q, k, v, op.Unsqueeze(bias, [0, 1])))
        return op.Add(op.Reshape(op.Transpose(out, perm=[0, 2, 1]), op.Shape(x)), x)


class MidBlock3D(nn.Module):
    """Resnet, (causal attention), resnet."""

    def __init__(self, channels: int, c) -> None:
        super().__init__()
        self.resnets = nn.ModuleList([ResnetBlockCausal3D(channels, channels, c) for _ in "ab"])
        self.attentions = None
        if c.mid_block_add_attention:
            self.attentions = nn.ModuleList([CausalAttentionBlock(channels, c.norm_num_groups)])

    def forward(self, op, x):
        x = self.resnets[0](op, x)
        if self.attentions is not None:
            x = self.attentions[0](op, x)
        return self.resnets[1](op, x)


class DownsampleCausal3D(nn.Module):
    def __init__(self, channels: int, stride: tuple[int, int, int]) -> None:
        super().__init__()
        self.conv = CausalConv3d(channels, channels, 3, stride=stride)

    def forward(self, op, x):
        return self.conv(op, x)


class UpsampleCausal3D(nn.Module):
    """Nearest ``time x space x space`` repeats but the first frame's in time, then a causal conv."""

    def __init__(self, channels: int, factors: tuple[int, int]) -> None:
        super().__init__()
        self.time, self.space = factors
        self.conv = CausalConv3d(channels, channels, 3)

    def forward(self, op, x):
        if self.time == 2:  # frames 0, 1, 1, 2, 2, ...: output frame i repeats (i + 1) // 2
            end = op.Squeeze(op.Mul(op.Shape(x, start=2, end=3), _ints(op, [2])))
            steps = op.Range(op.Constant(value_int=1), end, op.Constant(value_int=1))  # 1 .. 2t-1
            x = op.Gather(x, op.Div(steps, op.Constant(value_int=2)), axis=2)
        if self.space == 2:
            scales = op.Constant(value=ir.tensor([1.0, 1.0, 1.0, 2.0, 2.0], ir.DataType.FLOAT))
            attrs = dict(coordinate_transformation_mode="asymmetric", nearest_mode="floor")
            x = op.Resize(x, None, scales, mode="nearest", **attrs)
        return self.conv(op, x)


class Block3D(nn.Module):
    """``resnets`` then an optional ``downsamplers.0`` / ``upsamplers.0``."""

    def __init__(self, in_channels, out_channels, layers, c, sampler_name, sampler) -> None:
        super().__init__()
        self.resnets = nn.ModuleList(
            [
                ResnetBlockCausal3D(in_channels if i == 0 else out_channels, out_channels, c)
                for i in range(layers)
            ]
        )
        self.sampler_name = sampler_name
        setattr(self, sampler_name, None if sampler is None else nn.ModuleList([sampler]))

    def forward(self, op, x):
        for resnet in self.resnets:
            x = resnet(op, x)
        sampler = getattr(self, self.sampler_name)
        return x if sampler is None else sampler[0](op, x)


class Encoder3D(nn.Module):
    def __init__(self, c: AutoencoderKLHunyuanVideoConfig) -> None:
        super().__init__()
        widths = c.block_out_channels
        self.act = activation(c.act_fn)
        self.conv_in = CausalConv3d(c.in_channels, widths[0], 3)
        blocks = []
        for i, width in enumerate(widths):
            time, space = c.factors(i)
            down = (
                None if (time, space) == (1, 1) else DownsampleCausal3D(width, (time, space, space))
            )
            blocks.append(
                Block3D(widths[max(i - 1, 0)], width, c.layers_per_block, c, "downsamplers", down)
            )
        self.down_blocks = nn.ModuleList(blocks)
        self.mid_block = MidBlock3D(widths[-1], c)
        self.conv_norm_out = GroupNorm(c.norm_num_groups, widths[-1], _EPS, spatial_dims=3)
        self.conv_out = CausalConv3d(widths[-1], 2 * c.latent_channels, 3)

    def forward(self, op, x):
        x = self.conv_in(op, x)
        for block in self.down_blocks:
            x = block(op, x)
        x = self.mid_block(op, x)
        return self.conv_out(op, self.act(op, self.conv_norm_out(op, x)))


class Decoder3D(nn.Module):
    def __init__(self, c: AutoencoderKLHunyuanVideoConfig) -> None:
        super().__init__()
        widths = list(reversed(c.block_out_channels))
        self.act = activation(c.act_fn)
        self.conv_in = CausalConv3d(c.latent_channels, widths[0], 3)
        self.mid_block = MidBlock3D(widths[0], c)
        blocks = []
        for i, width in enumerate(widths):
            factors = c.factors(i)
            up = None if factors == (1, 1) else UpsampleCausal3D(width, factors)
            blocks.append(
                Block3D(widths[max(i - 1, 0)], width, c.layers_per_block + 1, c, "upsamplers", up)
            )
        self.up_blocks = nn.ModuleList(blocks)
        self.conv_norm_out = GroupNorm(c.norm_num_groups, widths[-1], _EPS, spatial_dims=3)
        self.conv_out = CausalConv3d(widths[-1], c.out_channels, 3)

    def forward(self, op, z):
        x = self.mid_block(op, self.conv_in(op, z))
        for block in self.up_blocks:
            x = block(op, x)
        return self.conv_out(op, self.act(op, self.conv_norm_out(op, x)))


class AutoencoderKLHunyuanVideo(AutoencoderKL):
    """diffusers' ``AutoencoderKLHunyuanVideo``: ``encoder/model`` and ``decoder/model`` over video."""

    config_class = AutoencoderKLHunyuanVideoConfig
    encoder_class, decoder_class, conv_class = Encoder3D, Decoder3D, Conv3d
    sample_axes = ("frames", "height", "width")
    latent_axes = ("latent_frames", "latent_height", "latent_width")


MODEL_TYPES = {"AutoencoderKLHunyuanVideo": AutoencoderKLHunyuanVideo}
