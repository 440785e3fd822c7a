"""AutoencoderKLMochi: Mochi 1's causal video VAE, over ``[batch, channels, frames, h, w]``.

Every conv is a ``CogVideoXCausalConv3d`` in replicate mode: the input edge-padded by
``k_t - 1`` frames in front and ``(k - 1) // 2`` pixels on each side, then a plain 3-D
conv. Norms are GroupNorms of 32 groups over each frame on its own. Resnets are norm,
SiLU, causal conv, twice, plus the input (the width never changes inside a block).

The encoder adds Fourier features (``sin``/``cos`` of the pixels at ``2^6`` and ``2^7``
turns: 5x the channels), projects every pixel with ``proj_in``, runs ``block_in``, the
down blocks (a strided causal conv of kernel = stride ``(time, space, space)``, then
resnets, each followed by a causal attention over the frames of each pixel with
L2-normed queries and keys, heads of 32 channels), ``block_out``, norm, SiLU and
``proj_out`` to the moments. The decoder mirrors it without attention: a 1x1x1
``conv_in``, up blocks ending in a per-pixel ``proj`` unfolded into
``time x space x space`` (depth to space), ``proj_out``; of the ``frames x
temporal_compression`` frames decoded, the first ``temporal_compression - 1`` are
dropped (diffusers' ``drop_last_temporal_frames``).

Graphs (:class:`mobius.tasks.VAETask`): ``encoder/model`` ``sample`` ->
``latent_parameters`` (``latent_dist.parameters``), ``decoder/model`` ``latent_sample``
-> ``sample``, each one pass over the whole clip (diffusers' default, neither tiled nor
frame-wise). ``latents_mean``, ``latents_std`` and ``scaling_factor`` stay in
``config.json``: the pipeline applies them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv3d, Linear
from mobius.errors import ConfigError
from mobius_diffusion.models._checks import config_int, config_ints
from mobius_diffusion.models._resnet import activation
from mobius_diffusion.models.autoencoder_kl import AutoencoderKL

GROUPS, GROUP_EPS = 32, 1e-5  # MochiChunkedGroupNorm3D's GroupNorm
HEAD_DIM, QK_EPS = 32, 1e-5  # the attention's heads, and its L2 norms' floor
FOURIER_POWERS = (6, 7)  # FourierFeatures(start=6, stop=8): turns of 2^6 and 2^7


def _ints(op, values):
    return op.Constant(value_ints=list(values))


@dataclass
class AutoencoderKLMochiConfig:
    #: the video's channels; diffusers' ``in_channels`` counts them with their Fourier features
    in_channels: int = 3
    out_channels: int = 3
    encoder_block_out_channels: tuple[int, ...] = (64, 128, 256, 384)
    decoder_block_out_channels: tuple[int, ...] = (128, 256, 512, 768)
    latent_channels: int = 12
    layers_per_block: tuple[int, ...] = (3, 3, 4, 6, 3)
    act_fn: str = "silu"
    temporal_expansions: tuple[int, ...] = (1, 2, 3)
    spatial_expansions: tuple[int, ...] = (2, 2, 2)
    add_attention_block: tuple[bool, ...] = (False, True, True, True, True)
    use_quant_conv: bool = False  # AutoencoderKL's fields: Mochi has neither 1x1 conv
    use_post_quant_conv: bool = False

    @classmethod
    def from_hf(cls, config: Any) -> AutoencoderKLMochiConfig:
        name = config.model_type
        features = 1 + 2 * len(FOURIER_POWERS)
        in_channels = config_int(config, "in_channels", 15)
        if in_channels % features:
            raise ConfigError(
                f"{name} in_channels {in_channels} must be the video's channels times {features} "
                "(the pixels and their Fourier features)"
            )
        encoder = config_ints(config, "encoder_block_out_channels", cls.encoder_block_out_channels)
        decoder = config_ints(config, "decoder_block_out_channels", cls.decoder_block_out_channels)
        levels = len(encoder)
        layers = config_ints(config, "layers_per_block", cls.layers_per_block, count=levels + 1)
        time = config_ints(config, "temporal_expansions", cls.temporal_expansions, count=levels - 1)
        space = config_ints(config, "spatial_expansions", cls.spatial_expansions, count=levels - 1)
        if len(decoder) != levels:
            raise ConfigError(f"{name} decoder_block_out_channels must have {levels} widths")
        if any(w % GROUPS for w in (*encoder, *decoder)):
            raise ConfigError(
                f"{name} block widths {[*encoder, *decoder]} must be multiples of {GROUPS} "
                "(the norms' groups and the attention's heads)"
            )
        attention = getattr(config, "add_attention_block", cls.add_attention_block)
        if (
            not isinstance(attention, list | tuple)
            or len(attention) != levels + 1
            or not all(isinstance(a, bool) for a in attention)
        ):
            raise ConfigError(f"{name} add_attention_block must be {levels + 1} booleans")
        act_fn = getattr(config, "act_fn", "silu")
        activation(act_fn)
        return cls(
            in_channels=in_channels // features,
            out_channels=config_int(config, "out_channels", 3),
            encoder_block_out_channels=encoder,
            decoder_block_out_channels=decoder,
            latent_channels=config_int(config, "latent_channels", 12),
            layers_per_block=layers,
            act_fn=act_fn,
            temporal_expansions=time,
            spatial_expansions=space,
            add_attention_block=tuple(attention),
        )

    @property
    def temporal_compression(self) -> int:
        return math.prod(self.temporal_expansions)


def channels_last(op, linear, x):
    """``linear`` over the channels of ``x [b, C, F, H, W]`` (diffusers' permute, Linear, permute)."""
    y = linear(op, op.Transpose(x, perm=[0, 2, 3, 4, 1]))
    return op.Transpose(y, perm=[0, 4, 1, 2, 3])


class FrameGroupNorm(nn.Module):
    """``MochiChunkedGroupNorm3D``'s ``nn.GroupNorm``: statistics per batch row, group and frame."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.channels = channels
        self.weight = nn.Parameter([channels])
        self.bias = nn.Parameter([channels])

    def forward(self, op, x):
        grouped = op.Reshape(
            x,
            op.Concat(
                op.Shape(x, start=0, end=1),
                _ints(op, [GROUPS, self.channels // GROUPS]),
                op.Shape(x, start=2, end=3),
                _ints(op, [-1]),
                axis=0,
            ),
        )  # [b, groups, C / groups, F, H*W]
        axes = _ints(op, [2, 4])
        centred = op.Sub(grouped, op.ReduceMean(grouped, axes, keepdims=1))
        var = op.ReduceMean(op.Mul(centred, centred), axes, keepdims=1)
        normed = op.Reshape(op.Div(centred, op.Sqrt(op.Add(var, GROUP_EPS))), op.Shape(x))
        per_channel = _ints(op, [-1, 1, 1, 1])
        return op.Add(
            op.Mul(normed, op.Reshape(self.weight, per_channel)),
            op.Reshape(self.bias, per_channel),
        )


class ChunkedGroupNorm3D(nn.Module):
    """``MochiChunkedGroupNorm3D`` (its chunks change nothing): ``norm_layer`` per frame."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm_layer = FrameGroupNorm(channels)

    def forward(self, op, x):
        return self.norm_layer(op, x)


class ReplicateCausalConv3d(nn.Module):
    """``CogVideoXCausalConv3d(pad_mode="replicate")``: edge-pad ``k_t - 1`` frames in front and
    ``(k - 1) // 2`` pixels around, then the conv (``stride`` per axis)."""

    def __init__(self, in_channels, out_channels, kernel, stride=(1, 1, 1)) -> None:
        super().__init__()
        k_t, k_h, k_w = (kernel,) * 3 if isinstance(kernel, int) else kernel
        h, w = (k_h - 1) // 2, (k_w - 1) // 2
        self.pads = [0, 0, k_t - 1, h, w, 0, 0, 0, h, w]
        self.conv = Conv3d(in_channels, out_channels, (k_t, k_h, k_w), stride=stride)

    def forward(self, op, x):
        if any(self.pads):
            x = op.Pad(x, _ints(op, self.pads), mode="edge")
        return self.conv(op, x)


class ResnetBlock3D(nn.Module):
    def __init__(self, channels: int, act_fn: str) -> None:
        super().__init__()
        self.act = activation(act_fn)
        self.norm1 = ChunkedGroupNorm3D(channels)
        self.conv1 = ReplicateCausalConv3d(channels, channels, 3)
        self.norm2 = ChunkedGroupNorm3D(channels)
        self.conv2 = ReplicateCausalConv3d(channels, channels, 3)

    def forward(self, op, x):
        h = self.conv1(op, self.act(op, self.norm1(op, x)))
        return op.Add(self.conv2(op, self.act(op, self.norm2(op, h))), x)


class FrameAttention(nn.Module):
    """diffusers' ``Attention(qk_norm="l2", is_causal=True)`` of the VAE: each pixel's frames
    attend to themselves and the frames before; queries and keys L2-normed per head."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.heads = channels // HEAD_DIM
        self.to_q, self.to_k, self.to_v = (Linear(channels, channels, bias=False) for _ in "qkv")
        self.to_out = nn.ModuleList([Linear(channels, channels, bias=True)])

    def l2_normed(self, op, x):
        heads = op.Reshape(x, _ints(op, [0, 0, self.heads, HEAD_DIM]))
        norm = op.Max(op.ReduceL2(heads, _ints(op, [-1]), keepdims=1), QK_EPS)
        return op.Reshape(op.Div(heads, norm), _ints(op, [0, 0, -1]))

    def forward(self, op, tokens):
        """``tokens [pixels, frames, C]`` -> the same, attended."""
        frames = op.Squeeze(op.Shape(tokens, start=1, end=2))
        steps = op.Range(op.Constant(value_int=0), frames, op.Constant(value_int=1))
        seen = op.LessOrEqual(op.Unsqueeze(steps, [0]), op.Unsqueeze(steps, [1]))  # [q, k]
        low = op.CastLike(op.Constant(value_float=float("-inf")), tokens)
        bias = op.Where(seen, op.CastLike(op.Constant(value_float=0.0), tokens), low)
        q = self.l2_normed(op, self.to_q(op, tokens))
        k = self.l2_normed(op, self.to_k(op, tokens))
        out = op.Attention(
            q,
            k,
            self.to_v(op, tokens),
            op.Unsqueeze(bias, [0, 1]),
            q_num_heads=self.heads,
            kv_num_heads=self.heads,
            scale=HEAD_DIM**-0.5,
        )
        return self.to_out[0](op, out)


class Block3D(nn.Module):
    """``MochiMidBlock3D``: resnets, each followed (``add_attention``) by a norm and the frames'
    attention, added back; ``MochiDownBlock3D`` puts its strided ``conv_in`` first."""

    def __init__(self, channels, layers, attention: bool, act_fn: str, conv_in=None) -> None:
        super().__init__()
        self.conv_in = conv_in
        self.resnets = nn.ModuleList([ResnetBlock3D(channels, act_fn) for _ in range(layers)])
        self.norms = self.attentions = None
        if attention:
            self.norms = nn.ModuleList([ChunkedGroupNorm3D(channels) for _ in range(layers)])
            self.attentions = nn.ModuleList([FrameAttention(channels) for _ in range(layers)])

    def attend(self, op, i: int, x):
        tokens = op.Transpose(self.norms[i](op, x), perm=[0, 3, 4, 2, 1])  # [b, H, W, F, C]
        out = self.attentions[i](
            op, op.Reshape(tokens, op.Concat(_ints(op, [-1]), op.Shape(tokens, start=3), axis=0))
        )
        out = op.Reshape(out, op.Shape(tokens))
        return op.Add(x, op.Transpose(out, perm=[0, 4, 3, 1, 2]))

    def forward(self, op, x):
        if self.conv_in is not None:
            x = self.conv_in(op, x)
        for i, resnet in enumerate(self.resnets):
            x = resnet(op, x)
            if self.attentions is not None:
                x = self.attend(op, i, x)
        return x


class UpBlock3D(nn.Module):
    """``MochiUpBlock3D``: resnets, then ``proj`` of each pixel unfolded to ``t x s x s`` pixels."""

    def __init__(self, in_channels, out_channels, layers, time, space, act_fn) -> None:
        super().__init__()
        self.resnets = nn.ModuleList([ResnetBlock3D(in_channels, act_fn) for _ in range(layers)])
        self.proj = Linear(in_channels, out_channels * time * space * space, bias=True)
        self.out_channels, self.time, self.space = out_channels, time, space

    def forward(self, op, x):
        for resnet in self.resnets:
            x = resnet(op, x)
        x = channels_last(op, self.proj, x)  # [b, C * t * s * s, F, H, W]
        t, s = self.time, self.space
        shape = op.Concat(_ints(op, [0, self.out_channels, t, s, s]), op.Shape(x, start=2), axis=0)
        x = op.Transpose(op.Reshape(x, shape), perm=[0, 1, 5, 2, 6, 3, 7, 4])  # [b,C,F,t,H,s,W,s]
        sizes = (
            op.Mul(op.Shape(x, start=axis, end=axis + 1), _ints(op, [factor]))
            for axis, factor in ((2, t), (4, s), (6, s))
        )
        out = op.Concat(_ints(op, [0, self.out_channels]), *sizes, axis=0)
        return op.Reshape(x, out)


def fourier_features(op, video):
    """``[x, sin(h), cos(h)]``, ``h`` each channel times ``2pi * 2^6`` and ``2pi * 2^7`` (in
    turn); in float32 whatever the graph's type, as diffusers computes them."""
    x = op.Cast(video, to=ir.DataType.FLOAT)
    turns = np.array([2.0**p for p in FOURIER_POWERS], np.float32) * np.float32(2 * np.pi)
    scales = op.Constant(value=ir.tensor(turns.reshape(1, 1, -1, 1, 1, 1)))
    h = op.Mul(op.Unsqueeze(x, _ints(op, [2])), scales)  # [b, C, 2, F, H, W]
    h = op.Reshape(
        h, op.Concat(_ints(op, [0, -1]), op.Shape(x, start=2), axis=0)
    )  # [b, 2C, F, H, W], each channel's frequencies together
    return op.CastLike(op.Concat(x, op.Sin(h), op.Cos(h), axis=1), video)


class Encoder3D(nn.Module):
    def __init__(self, c: AutoencoderKLMochiConfig) -> None:
        super().__init__()
        widths, layers, attention = (
            c.encoder_block_out_channels,
            c.layers_per_block,
            c.add_attention_block,
        )
        self.act = activation(c.act_fn)
        self.proj_in = Linear(c.in_channels * (1 + 2 * len(FOURIER_POWERS)), widths[0], bias=True)
        self.block_in = Block3D(widths[0], layers[0], attention[0], c.act_fn)
        blocks = []
        for i, (time, space) in enumerate(
            zip(c.temporal_expansions, c.spatial_expansions, strict=True)
        ):
            kernel = (time, space, space)
            conv = ReplicateCausalConv3d(widths[i], widths[i + 1], kernel, stride=kernel)
            blocks.append(Block3D(widths[i + 1], layers[i + 1], attention[i + 1], c.act_fn, conv))
        self.down_blocks = nn.ModuleList(blocks)
        self.block_out = Block3D(widths[-1], layers[-1], attention[-1], c.act_fn)
        self.norm_out = ChunkedGroupNorm3D(widths[-1])
        self.proj_out = Linear(widths[-1], 2 * c.latent_channels, bias=False)

    def forward(self, op, x):
        x = self.block_in(op, channels_last(op, self.proj_in, fourier_features(op, x)))
        for block in self.down_blocks:
            x = block(op, x)
        x = self.act(op, self.norm_out(op, self.block_out(op, x)))
        return channels_last(op, self.proj_out, x)


class Decoder3D(nn.Module):
    def __init__(self, c: AutoencoderKLMochiConfig) -> None:
        super().__init__()
        widths, layers = c.decoder_block_out_channels, c.layers_per_block
        self.act = activation(c.act_fn)
        self.drop = c.temporal_compression - 1
        self.conv_in = Conv3d(c.latent_channels, widths[-1], 1)
        self.block_in = Block3D(widths[-1], layers[-1], False, c.act_fn)
        self.up_blocks = nn.ModuleList(
            [
                UpBlock3D(
                    widths[-i - 1],
                    widths[-i - 2],
                    layers[-i - 2],
                    c.temporal_expansions[-i - 1],
                    c.spatial_expansions[-i - 1],
                    c.act_fn,
                )
                for i in range(len(widths) - 1)
            ]
        )
        self.block_out = Block3D(widths[0], layers[0], False, c.act_fn)
        self.proj_out = Linear(widths[0], c.out_channels, bias=True)

    def forward(self, op, z):
        x = self.block_in(op, self.conv_in(op, z))
        for block in self.up_blocks:
            x = block(op, x)
        x = channels_last(op, self.proj_out, self.act(op, self.block_out(op, x)))
        if not self.drop:
            return x
        # latent frames * compression >= compression: diffusers always drops these
        return op.Slice(x, _ints(op, [self.drop]), _ints(op, [2**62]), _ints(op, [2]))


class AutoencoderKLMochi(AutoencoderKL):
    """diffusers' ``AutoencoderKLMochi``: ``encoder/model`` and ``decoder/model`` over video."""

    config_class = AutoencoderKLMochiConfig
    encoder_class, decoder_class, conv_class = Encoder3D, Decoder3D, Conv3d
    sample_axes = ("frames", "height", "width")
    latent_axes = ("latent_frames", "latent_height", "latent_width")


MODEL_TYPES = {"AutoencoderKLMochi": AutoencoderKLMochi}
