"""AutoencoderKLWan: the causal 3-D VAE of Wan 2.1 and 2.2, over ``[batch, channels, frames, h, w]``.

Every 3-D conv is causal in time (``WanCausalConv3d``: zero frames in front, none
behind); norms are ``WanRMS_norm`` (each pixel's channel vector scaled to unit RMS,
times ``gamma``); the mid blocks attend over each frame's pixels with one head.
Down blocks halve space with a per-frame 3x3 conv (bottom/right padding), and the
temporal ones also halve time with ``time_conv`` (3 frames, stride 2); up blocks
mirror that: ``time_conv`` doubles the channels and the halves become two frames.

diffusers encodes the first frame alone, then chunks of 4 frames (frames past the
last whole chunk are dropped), and decodes one latent frame at a time, carrying
each conv's last input frames to the next chunk. ``encoder/model`` and
``decoder/model`` compute that in one pass: the carried causal convs are plain causal
convs over the whole clip. What the first chunk does on its own is reproduced: a
temporal downsample passes the first frame through and strides its ``time_conv``
from frame 0 on (chunks of 4 keep that alignment); a temporal upsample passes the
first frame through and runs its ``time_conv`` over the later frames as if the first
were zeros (diffusers starts that conv's cache there). Graphs
(:class:`mobius.tasks.VAETask`): ``encoder/model`` ``sample`` -> ``latent_parameters``
(``latent_dist.parameters``); ``decoder/model`` ``latent_sample`` -> ``sample`` clamped
to [-1, 1] as diffusers does, every frame at once, so its memory grows with the
frames; ``decoder_step/model``, diffusers' frame-by-frame decode: ``latent_sample``
(one latent frame, or more) and ``past_frames.{i}`` -> ``sample`` and
``present_frames.{i}``, the frames each causal conv carries to the next step
(:class:`~mobius_diffusion.models._wan_vae_blocks.FrameCache`: none on the first step,
``[batch, channels, 2, latent_height*s, latent_width*s]`` after). The runners decode
a video with it (:func:`mobius_diffusion.tiling.decode_stepwise`), so memory stays that
of one latent frame whatever the length; the whole graph still decodes one latent frame
(an image: Qwen-Image), which needs no caches, and is what the VAE contract, ``mobius
validate`` and packages built before the step graph decode with.

Wan 2.2's VAE (``is_residual``) adds to each down block the average of its input
over the block's downsampling (``AvgDown3D``: a zero frame in front of an even
clip, as diffusers' first one-frame chunk gets) and to each up block its input
repeated to the block's size (``DupUp3D``, its first repeated frame dropped as in
diffusers' first chunk); ``patch_size`` folds ``p x p`` pixels into the channels
before the encoder and back after the decoder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Conv3d
from mobius.errors import ConfigError
from mobius_diffusion.models._wan_vae_blocks import (
    CausalConv3d,
    DupUp3D,
    FrameCache,
    MidBlock,
    Resample,
    ResidualBlock,
    ResidualDownBlock,
    RMSNorm,
    _frames,
    _ints,
    _silu,
    _sizes,
)
from mobius_diffusion.models.autoencoder_kl import AutoencoderKL
from mobius_diffusion.models.wan import positive_int
from mobius_diffusion.tasks import GraphSpec

#: diffusers encodes the first frame, then chunks of this many frames (fixed in its code).
_ENCODE_CHUNK = 4


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

    def forward(self, op, x, cache: FrameCache | None = None):
        for resnet in self.resnets:
            x = resnet(op, x, cache)
        return x if self.upsamplers is None else self.upsamplers[0](op, x, cache)


class ResidualUpBlock(UpBlock):
    """``WanResidualUpBlock`` (Wan 2.2): an ``UpBlock`` whose upsampler keeps the width, plus
    ``avg_shortcut`` (the input repeated to the output's size)."""

    def __init__(self, in_dim, out_dim, num_res_blocks: int, temporal: bool, up: bool) -> None:
        super().__init__(in_dim, out_dim, num_res_blocks, None)
        self.avg_shortcut = DupUp3D(in_dim, out_dim, 2 if temporal else 1, 2) if up else None
        mode = "upsample3d" if temporal else "upsample2d"
        self.upsampler = Resample(out_dim, mode, upsample_out_dim=out_dim) if up else None

    def forward(self, op, x, cache: FrameCache | None = None):
        out = super().forward(op, x, cache)
        if self.upsampler is None:
            return out
        first = None  # a whole clip, or no temporal upsample
        if cache is not None and self.upsampler.time_conv is not None:
            first = cache.first(op, self.upsampler.time_conv)
        out = self.upsampler(op, out, cache)
        return op.Add(out, self.avg_shortcut(op, x, first))


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

    def forward(self, op, x, cache: FrameCache | None = None):
        x = self.mid_block(op, self.conv_in(op, x, cache), cache)
        for block in self.up_blocks:
            x = block(op, x, cache)
        return self.conv_out(op, _silu(op, self.norm_out(op, x)), cache)

    def cached_convs(self) -> list[tuple[CausalConv3d, int]]:
        """Each conv that carries frames from one decoder step to the next, in diffusers'
        ``feat_cache`` order, with the pixels per latent on a side of its input (every up
        block but the last doubles them)."""
        found = []
        for name, module in self.named_modules():
            if isinstance(module, CausalConv3d) and module.front_frames:
                block = name.split(".")
                scale = 1
                if block[0] == "up_blocks":
                    scale = 2 ** int(block[1])
                elif block[0] == "conv_out":
                    scale = 2 ** (len(self.up_blocks) - 1)
                found.append((module, scale))
        return found


class AutoencoderKLWan(AutoencoderKL):
    """diffusers' ``AutoencoderKLWan``: ``encoder/model``, ``decoder/model`` and
    ``decoder_step/model`` over video (see the module docstring)."""

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

    def decode(self, op, latent_sample, cache: FrameCache | None = None):
        """The decoded clip; one step of the frame-by-frame decode when ``cache`` is given."""
        z = latent_sample
        if self.post_quant_conv is not None:
            z = self.post_quant_conv(op, z)
        sample = self.unpatchify(op, self.decoder(op, z, cache))
        low, high = op.CastLike(-1.0, sample), op.CastLike(1.0, sample)
        return op.Clip(sample, low, high)

    def decode_step(self, op, latent_sample, **past) -> dict:
        """``decoder_step/model``: ``sample`` and ``present_frames.{i}`` of ``latent_sample``
        after the frames ``past_frames.{i}`` (none on the first step)."""
        convs = [conv for conv, _ in self.decoder.cached_convs()]
        cache = FrameCache({id(conv): past[f"past_frames.{i}"] for i, conv in enumerate(convs)})
        outputs = {"sample": self.decode(op, latent_sample, cache)}
        for i, conv in enumerate(convs):
            outputs[f"present_frames.{i}"] = cache.present[id(conv)]
        return outputs

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
        whole = specs["decoder/model"]
        inputs, outputs = dict(whole.inputs), dict(whole.outputs)
        # A parameter is an initializer of the one graph that realizes it first: the step
        # graph holds its own, of the same names (the weights fill every graph's copy).
        stepper = type(self)(self.config)
        for i, (conv, scale) in enumerate(stepper.decoder.cached_convs()):
            grid = [axis if scale == 1 else f"{axis}*{scale}" for axis in self.latent_axes[1:]]
            width = conv.in_channels
            inputs[f"past_frames.{i}"] = (None, ["batch", width, "past_frames", *grid])
            outputs[f"present_frames.{i}"] = ["batch", width, conv.front_frames, *grid]
        specs["decoder_step/model"] = GraphSpec(inputs, outputs, stepper.decode_step)
        return specs


MODEL_TYPES = {"AutoencoderKLWan": AutoencoderKLWan}
