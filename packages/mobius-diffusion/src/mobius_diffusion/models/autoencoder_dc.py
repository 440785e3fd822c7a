"""AutoencoderDC: the deep-compression autoencoder (DC-AE) of Sana, 32x to 128x downscaling.

Encoder: ``conv_in``, then per width a stack of ``ResBlock``s (conv, activation,
bias-free conv, channel norm, residual) or ``EfficientViTBlock``s (multi-scale
ReLU linear attention, then Mix-FFN), each stack but the last ending in a
``DCDownBlock2d``: a stride-2 conv (or a conv and pixel-unshuffle) plus the
pixel-unshuffled input averaged over groups of channels. ``conv_out`` to the
latent channels, plus the last features averaged down to them. The decoder
mirrors it: ``conv_in`` plus the latent repeated up to its width, stacks that
begin with a ``DCUpBlock2d`` (nearest 2x and conv, or conv and pixel-shuffle, plus
the channel-repeated, pixel-shuffled input), then ``norm_out`` (channel RMS norm),
an activation and ``conv_out``.

There is no latent distribution: the encoder gives the latent itself. Graphs
(:class:`mobius.tasks.VAETask`): ``encoder/model`` ``sample`` -> ``latent``
[batch, latent_channels, height/f, width/f] (diffusers' ``encode(x).latent``,
before ``scaling_factor``) and ``decoder/model`` ``latent_sample`` -> ``sample``.
Module tree and names follow diffusers' ``AutoencoderDC`` checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import BatchNorm, Conv2d, Linear
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._checks import config_choice, config_int, config_ints, per_block
from mobius_diffusion.models._resnet import activation, upsample_nearest
from mobius_diffusion.models.sana import ChannelRMSNorm, GLUMBConv, relu_linear_attention
from mobius_diffusion.tasks import GraphSpec

BLOCK_TYPES = ("ResBlock", "EfficientViTBlock")
NORM_TYPES = ("rms_norm", "batch_norm")
ACTIVATIONS = ("silu", "swish", "gelu", "relu")
#: diffusers takes any value but the first as the other kind; the hub's are these.
UPSAMPLE_TYPES = ("pixel_shuffle", "interpolate")
DOWNSAMPLE_TYPES = ("pixel_unshuffle", "Conv", "conv")
#: diffusers' default widths (and so stage count) of both sides.
_WIDTHS = (128, 256, 512, 512, 1024, 1024)
#: Every resampling block halves or doubles the image.
FACTOR = 2


def channel_norm(kind: str, channels: int) -> nn.Module:
    """diffusers' ``get_normalization`` over ``[b, c, h, w]``: RMS over channels, or BatchNorm."""
    return ChannelRMSNorm(channels) if kind == "rms_norm" else BatchNorm(channels, 1e-5)


def _ints(op, values):
    return op.Constant(value_ints=list(values))


def pixel_unshuffle(op, x, factor: int = FACTOR):
    """``F.pixel_unshuffle(x, f)`` (f = 2): ``[b, c, H, W]`` -> ``[b, f*f*c, H/f, W/f]``.

    Output channel ``f*f*c + f*i + j`` holds the pixels at offset ``(i, j)`` of each block.
    """
    half = [op.Div(op.Shape(x, start=i, end=i + 1), _ints(op, [factor])) for i in (2, 3)]
    blocks = op.Reshape(
        x, op.Concat(_ints(op, [0, 0]), half[0], _ints(op, [factor]), half[1], [factor], axis=0)
    )  # [b, c, H/f, f, W/f, f]
    blocks = op.Transpose(blocks, perm=[0, 1, 3, 5, 2, 4])
    return op.Reshape(blocks, op.Concat(_ints(op, [0, -1]), *half, axis=0))


def pixel_shuffle(op, x, factor: int = FACTOR):
    """``F.pixel_shuffle(x, f)`` (f = 2): ONNX's DepthToSpace in column-row-depth order."""
    return op.DepthToSpace(x, blocksize=factor, mode="CRD")


def channel_average(op, x, group: int):
    """``x.unflatten(1, (-1, group)).mean(2)``: each run of ``group`` channels averaged."""
    grouped = op.Reshape(x, op.Concat(_ints(op, [0, -1, group]), op.Shape(x, start=2), axis=0))
    return op.ReduceMean(grouped, _ints(op, [2]), keepdims=0)


def channel_repeat(op, x, repeats: int):
    """``x.repeat_interleave(repeats, dim=1)``: each channel ``repeats`` times in a row."""
    repeated = op.Expand(op.Unsqueeze(x, _ints(op, [2])), _ints(op, [1, 1, repeats, 1, 1]))
    return op.Reshape(repeated, op.Concat(_ints(op, [0, -1]), op.Shape(x, start=2), axis=0))


class ResBlock(nn.Module):
    """``conv1``, activation, ``conv2`` (no bias), ``norm``, plus the input."""

    def __init__(self, channels: int, norm_type: str, act_fn: str) -> None:
        super().__init__()
        self.act = activation(act_fn)
        self.conv1 = Conv2d(channels, channels, 3, padding=1)
        self.conv2 = Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm = channel_norm(norm_type, channels)

    def forward(self, op, x):
        h = self.conv2(op, self.act(op, self.conv1(op, x)))
        return op.Add(self.norm(op, h), x)


class SanaMultiscaleAttentionProjection(nn.Module):
    """A depthwise ``proj_in`` (kernel ``k``) and a grouped 1x1 ``proj_out`` of the q, k, v maps."""

    def __init__(self, channels: int, heads: int, kernel_size: int) -> None:
        super().__init__()
        self.proj_in = Conv2d(
            channels, channels, kernel_size, padding=kernel_size // 2, groups=channels, bias=False
        )
        self.proj_out = Conv2d(channels, channels, 1, groups=3 * heads, bias=False)

    def forward(self, op, x):
        return self.proj_out(op, self.proj_in(op, x))


class SanaMultiscaleLinearAttention(nn.Module):
    """EfficientViT's LiteMLA over ``[b, c, h, w]``: q, k, v per pixel, more maps from each
    multi-scale projection, ReLU linear attention per head of every map, ``to_out``,
    ``norm_out``, plus the input.

    diffusers switches to a quadratic form when ``h * w <= attention_head_dim``; it is the
    same function (the normaliser divides either way), so one form is built.
    """

    def __init__(self, channels: int, head_dim: int, norm_type: str, kernel_sizes) -> None:
        super().__init__()
        heads = channels // head_dim  # diffusers' int(in_channels // head_dim * mult), mult 1
        if heads < 1:
            raise ConfigError(
                f"AutoencoderDC attention_head_dim {head_dim} is wider than a block ({channels})"
            )
        inner = heads * head_dim
        self.head_dim = head_dim
        self.to_q = Linear(channels, inner)
        self.to_k = Linear(channels, inner)
        self.to_v = Linear(channels, inner)
        self.to_qkv_multiscale = nn.ModuleList(
            [SanaMultiscaleAttentionProjection(3 * inner, heads, k) for k in kernel_sizes]
        )
        self.to_out = Linear(inner * (1 + len(kernel_sizes)), channels)
        self.norm_out = channel_norm(norm_type, channels)

    def forward(self, op, x):
        pixels = op.Transpose(x, perm=[0, 2, 3, 1])  # [b, h, w, c]
        qkv = op.Concat(self.to_q(op, pixels), self.to_k(op, pixels), self.to_v(op, pixels), axis=3)
        qkv = op.Transpose(qkv, perm=[0, 3, 1, 2])
        maps = op.Concat(qkv, *(scale(op, qkv) for scale in self.to_qkv_multiscale), axis=1)
        # Heads of 3 * head_dim channels each: that head's q, k and v, in that order.
        maps = op.Reshape(maps, _ints(op, [0, 0, -1]))  # [b, channels, h*w]
        heads = op.Reshape(
            maps, op.Concat(_ints(op, [0, -1, 3 * self.head_dim]), op.Shape(maps, start=2), axis=0)
        )
        q, k, v = op.Split(heads, axis=2, num_outputs=3, _outputs=3)
        out = relu_linear_attention(op, q, k, v)  # [b, heads, head_dim, h*w]
        out = op.Reshape(out, op.Concat(_ints(op, [0, -1]), op.Shape(x, start=2), axis=0))
        out = op.Transpose(self.to_out(op, op.Transpose(out, perm=[0, 2, 3, 1])), perm=[0, 3, 1, 2])
        return op.Add(self.norm_out(op, out), x)


class EfficientViTBlock(nn.Module):
    """``attn`` (multi-scale linear attention), then ``conv_out`` (Mix-FFN, RMS norm, residual)."""

    def __init__(self, channels: int, head_dim: int, norm_type: str, kernel_sizes) -> None:
        super().__init__()
        self.attn = SanaMultiscaleLinearAttention(channels, head_dim, norm_type, kernel_sizes)
        self.conv_out = GLUMBConv(channels, channels, rms_norm=True)

    def forward(self, op, x):
        return self.conv_out(op, self.attn(op, x))


def make_block(kind: str, channels: int, head_dim: int, norm_type: str, act_fn: str, scales):
    """A layer of a stage: ``ResBlock`` or ``EfficientViTBlock`` (diffusers' ``get_block``)."""
    if kind == "ResBlock":
        return ResBlock(channels, norm_type, act_fn)
    return EfficientViTBlock(channels, head_dim, norm_type, scales)


class DCDownBlock2d(nn.Module):
    """Half the size: ``conv`` (stride 2, or stride 1 then pixel-unshuffle), plus (``shortcut``)
    the pixel-unshuffled input averaged down to the output's channels."""

    def __init__(self, in_channels: int, out_channels: int, unshuffle: bool, shortcut: bool):
        super().__init__()
        self.unshuffle, self.shortcut = unshuffle, shortcut
        self.group_size = in_channels * FACTOR**2 // out_channels
        conv_out = out_channels // FACTOR**2 if unshuffle else out_channels
        self.conv = Conv2d(in_channels, conv_out, 3, stride=1 if unshuffle else 2, padding=1)

    def forward(self, op, x):
        h = self.conv(op, x)
        if self.unshuffle:
            h = pixel_unshuffle(op, h)
        if not self.shortcut:
            return h
        return op.Add(h, channel_average(op, pixel_unshuffle(op, x), self.group_size))


class DCUpBlock2d(nn.Module):
    """Twice the size: nearest 2x then ``conv`` (``interpolate``), or ``conv`` then pixel-shuffle;
    plus (``shortcut``) the input's channels repeated, pixel-shuffled."""

    def __init__(self, in_channels: int, out_channels: int, interpolate: bool, shortcut: bool):
        super().__init__()
        self.interpolate, self.shortcut = interpolate, shortcut
        self.repeats = out_channels * FACTOR**2 // in_channels
        conv_out = out_channels if interpolate else out_channels * FACTOR**2
        self.conv = Conv2d(in_channels, conv_out, 3, padding=1)

    def forward(self, op, x):
        if self.interpolate:
            h = self.conv(op, upsample_nearest(op, x))
        else:
            h = pixel_shuffle(op, self.conv(op, x))
        if not self.shortcut:
            return h
        return op.Add(h, pixel_shuffle(op, channel_repeat(op, x, self.repeats)))


@dataclass
class AutoencoderDCConfig:
    in_channels: int = 3
    latent_channels: int = 32
    attention_head_dim: int = 32
    encoder_block_types: tuple[str, ...] = ("ResBlock",)
    decoder_block_types: tuple[str, ...] = ("ResBlock",)
    encoder_block_out_channels: tuple[int, ...] = (128,)
    decoder_block_out_channels: tuple[int, ...] = (128,)
    encoder_layers_per_block: tuple[int, ...] = (2,)
    decoder_layers_per_block: tuple[int, ...] = (3,)
    encoder_qkv_multiscales: tuple[tuple[int, ...], ...] = ((),)
    decoder_qkv_multiscales: tuple[tuple[int, ...], ...] = ((),)
    pixel_shuffle_up: bool = True
    pixel_unshuffle_down: bool = True
    decoder_norm_types: tuple[str, ...] = ("rms_norm",)
    decoder_act_fns: tuple[str, ...] = ("silu",)
    encoder_out_shortcut: bool = True
    decoder_in_shortcut: bool = True
    decoder_conv_act_fn: str = "relu"

    @classmethod
    def from_hf(cls, config: Any) -> AutoencoderDCConfig:
        # diffusers' defaults are the f32c32 layout's
        enc = _side(config, "encoder", (2, 2, 2, 3, 3, 3))
        dec = _side(config, "decoder", (3,) * 6)
        latent = config_int(config, "latent_channels", 32)
        for shortcut, stages in (("encoder_out_shortcut", enc), ("decoder_in_shortcut", dec)):
            widest = stages["widths"][-1]  # averaged down to, or repeated up from, the latent
            if getattr(config, shortcut, True) and widest % latent:
                raise ConfigError(
                    f"AutoencoderDC {shortcut}: width {widest} is no multiple of "
                    f"latent_channels {latent}"
                )
        n = len(dec["widths"])
        return cls(
            in_channels=config_int(config, "in_channels", 3),
            latent_channels=latent,
            attention_head_dim=config_int(config, "attention_head_dim", 32),
            encoder_block_types=enc["block_types"],
            decoder_block_types=dec["block_types"],
            encoder_block_out_channels=enc["widths"],
            decoder_block_out_channels=dec["widths"],
            encoder_layers_per_block=enc["layers"],
            decoder_layers_per_block=dec["layers"],
            encoder_qkv_multiscales=enc["scales"],
            decoder_qkv_multiscales=dec["scales"],
            pixel_shuffle_up=config_choice(
                config, "upsample_block_type", "pixel_shuffle", UPSAMPLE_TYPES
            )
            == "pixel_shuffle",
            pixel_unshuffle_down=config_choice(
                config, "downsample_block_type", "pixel_unshuffle", DOWNSAMPLE_TYPES
            )
            == "pixel_unshuffle",
            decoder_norm_types=per_block(config, "decoder_norm_types", "rms_norm", n, NORM_TYPES),
            decoder_act_fns=per_block(config, "decoder_act_fns", "silu", n, ACTIVATIONS),
            encoder_out_shortcut=bool(getattr(config, "encoder_out_shortcut", True)),
            decoder_in_shortcut=bool(getattr(config, "decoder_in_shortcut", True)),
            decoder_conv_act_fn=config_choice(config, "decoder_conv_act_fn", "relu", ACTIVATIONS),
        )


def _side(config: Any, side: str, layers_default: tuple[int, ...]) -> dict[str, tuple]:
    """The encoder's or decoder's stages: block types, widths, layers and multi-scale kernels."""
    widths = config_ints(config, f"{side}_block_out_channels", _WIDTHS)
    n = len(widths)
    layers = config_ints(config, f"{side}_layers_per_block", layers_default, n, low=0)
    if 0 in layers[1:] or (layers[0] == 0 and n < 2):
        raise ConfigError(
            f"AutoencoderDC {side}_layers_per_block {list(layers)}: only the first stage "
            "may have no layers (diffusers builds no other)"
        )
    for narrow, wide in zip(widths, widths[1:], strict=False):
        # the resampling shortcuts average or repeat whole groups of channels
        if (FACTOR**2 * narrow) % wide or (FACTOR**2 * wide) % narrow:
            raise ConfigError(
                f"AutoencoderDC {side}_block_out_channels {list(widths)}: {narrow} -> {wide} "
                "does not resample by whole channel groups"
            )
    scales = getattr(config, f"{side}_qkv_multiscales", ((),) * n)
    if not isinstance(scales, list | tuple) or len(scales) != n:
        raise ConfigError(f"AutoencoderDC {side}_qkv_multiscales must give {n} lists")
    for kernels in scales:
        if not isinstance(kernels, list | tuple) or any(
            isinstance(k, bool) or not isinstance(k, int) or k < 1 or k % 2 == 0 for k in kernels
        ):
            raise ConfigError(
                f"AutoencoderDC {side}_qkv_multiscales holds {kernels!r}: not odd kernel sizes"
            )
    return dict(
        block_types=per_block(config, f"{side}_block_types", "ResBlock", n, BLOCK_TYPES),
        widths=widths,
        layers=layers,
        scales=tuple(tuple(k) for k in scales),
    )


class Encoder(nn.Module):
    """Image -> latent: ``conv_in``, ``down_blocks`` (a list of layers per stage), ``conv_out``."""

    def __init__(self, c: AutoencoderDCConfig) -> None:
        super().__init__()
        widths, layers = c.encoder_block_out_channels, c.encoder_layers_per_block
        if layers[0] > 0:
            self.conv_in = Conv2d(c.in_channels, widths[0], 3, padding=1)
        else:  # the first stage is the input's own downsampling
            self.conv_in = DCDownBlock2d(
                c.in_channels, widths[1], c.pixel_unshuffle_down, shortcut=False
            )
        stages = []
        for i, (width, count) in enumerate(zip(widths, layers, strict=True)):
            blocks = [
                make_block(
                    c.encoder_block_types[i],
                    width,
                    c.attention_head_dim,
                    "rms_norm",
                    "silu",
                    c.encoder_qkv_multiscales[i],
                )
                for _ in range(count)
            ]
            if i < len(widths) - 1 and count > 0:
                blocks.append(
                    DCDownBlock2d(width, widths[i + 1], c.pixel_unshuffle_down, shortcut=True)
                )
            stages.append(nn.ModuleList(blocks))
        self.down_blocks = nn.ModuleList(stages)
        self.conv_out = Conv2d(widths[-1], c.latent_channels, 3, padding=1)
        self.out_shortcut_group = widths[-1] // c.latent_channels if c.encoder_out_shortcut else 0

    def forward(self, op, x):
        x = self.conv_in(op, x)
        for stage in self.down_blocks:
            for block in stage:
                x = block(op, x)
        latent = self.conv_out(op, x)
        if self.out_shortcut_group:
            latent = op.Add(latent, channel_average(op, x, self.out_shortcut_group))
        return latent


class Decoder(nn.Module):
    """Latent -> image: ``conv_in``, ``up_blocks`` (last stage first), ``norm_out``, ``conv_out``."""

    def __init__(self, c: AutoencoderDCConfig) -> None:
        super().__init__()
        widths, layers = c.decoder_block_out_channels, c.decoder_layers_per_block
        self.conv_in = Conv2d(c.latent_channels, widths[-1], 3, padding=1)
        self.in_shortcut_repeats = widths[-1] // c.latent_channels if c.decoder_in_shortcut else 0
        interpolate = not c.pixel_shuffle_up
        stages = []
        for i, (width, count) in enumerate(zip(widths, layers, strict=True)):
            blocks = []
            if i < len(widths) - 1 and count > 0:
                blocks.append(DCUpBlock2d(widths[i + 1], width, interpolate, shortcut=True))
            blocks += [
                make_block(
                    c.decoder_block_types[i],
                    width,
                    c.attention_head_dim,
                    c.decoder_norm_types[i],
                    c.decoder_act_fns[i],
                    c.decoder_qkv_multiscales[i],
                )
                for _ in range(count)
            ]
            stages.append(nn.ModuleList(blocks))
        self.up_blocks = nn.ModuleList(stages)  # by stage, run from the last
        channels = widths[0] if layers[0] > 0 else widths[1]
        self.norm_out = ChannelRMSNorm(channels)
        self.conv_act = activation(c.decoder_conv_act_fn)
        if layers[0] > 0:
            self.conv_out = Conv2d(channels, c.in_channels, 3, padding=1)
        else:  # the first stage is the image's own upsampling
            self.conv_out = DCUpBlock2d(channels, c.in_channels, interpolate, shortcut=False)

    def forward(self, op, z):
        x = self.conv_in(op, z)
        if self.in_shortcut_repeats:
            x = op.Add(x, channel_repeat(op, z, self.in_shortcut_repeats))
        for stage in reversed(self.up_blocks):
            for block in stage:
                x = block(op, x)
        return self.conv_out(op, self.conv_act(op, self.norm_out(op, x)))


class AutoencoderDC(Model):
    """diffusers' ``AutoencoderDC``: ``encoder/model`` (-> ``latent``) and ``decoder/model``."""

    config_class = AutoencoderDCConfig
    task = "vae"
    #: BatchNorm's update counter: training state, not read in eval.
    ignored = ("*.num_batches_tracked",)

    def __init__(self, config: AutoencoderDCConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        latent = ["batch", c.latent_channels, "latent_height", "latent_width"]
        image = ["batch", c.in_channels, "height", "width"]
        return {
            "encoder/model": GraphSpec(
                {"sample": (None, image)},
                {"latent": latent},
                lambda op, sample: {"latent": self.encoder(op, sample)},
            ),
            "decoder/model": GraphSpec(
                {"latent_sample": (None, latent)},
                {"sample": image},
                lambda op, latent_sample: {"sample": self.decoder(op, latent_sample)},
            ),
        }


MODEL_TYPES = {"AutoencoderDC": AutoencoderDC}
