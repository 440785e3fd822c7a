"""AutoencoderKLLTXVideo: LTX-Video's VAE (0.9.0's layout, 0.9.1+'s decoder, 0.9.5+'s encoder).

The encoder folds ``patch_size x patch_size`` pixels into the channels (ordered
channel, column, row), runs causal 3-D convs and down blocks (0.9.0: a stride-2
conv; 0.9.5: ``LTXVideo095DownBlock3D`` folding space and/or time into depth), a mid
block and ``conv_out`` to ``latent_channels + 1`` channels: the means and one
log-variance, repeated to ``latent_channels`` (diffusers' ``latent_dist.parameters``).
The decoder (not causal by default) mirrors it with up blocks unfolding depth into
frames and pixels (the first frame of each doubling dropped); 0.9.1+'s adds each
input again (``upsample_residual``), halves the channels (``upsample_factor``), is
conditioned on a decode timestep (``timestep_conditioning``: the mid and up blocks
embed ``timestep * timestep_scale_multiplier`` and modulate their resnets, the output
norm is modulated too) and may inject noise (``decoder_inject_noise``).

Graphs (:class:`mobius.tasks.VAETask`): ``encoder/model`` ``sample`` [batch, channels,
frames, height, width] -> ``latent_parameters``; ``decoder/model`` ``latent_sample``
(+ ``timestep`` [batch] when conditioned, + ``noise.{i}`` [rows, columns] per noise
draw, in diffusers' order: each noisy resnet draws after each conv) -> ``sample``;
``latents/model`` (no inputs) -> ``mean``, ``std``: the checkpoint's ``latents_mean``
and ``latents_std``, which the LTX pipelines normalise latents with. Tiling and slicing are off, as
by default. ``patch_size_t`` other than 1 is refused (diffusers' encoder does not fold
frames into its ``conv_in`` channels).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._checks import config_float, config_int, config_ints
from mobius_diffusion.models._dit_blocks import _ints
from mobius_diffusion.models._ltx_vae_blocks import (
    CausalConv3d,
    DownBlock3D,
    MidBlock3d,
    UpBlock3d,
    channel_rms,
    modulation,
    silu,
    sizes,
)
from mobius_diffusion.models.ltx import config_bool
from mobius_diffusion.models.pixart import PixArtAlphaCombinedTimestepSizeEmbeddings
from mobius_diffusion.tasks import GraphSpec

DOWN_BLOCKS = ("LTXVideoDownBlock3D", "LTXVideo095DownBlock3D")
DOWNSAMPLES = ("conv", "spatial", "temporal", "spatiotemporal")


def config_bools(config: Any, name: str, default: Any, count: int) -> tuple[bool, ...]:
    """``config.name``: ``count`` booleans."""
    values = getattr(config, name, default)
    if (
        not isinstance(values, list | tuple)
        or len(values) != count
        or not all(isinstance(v, bool) for v in values)
    ):
        raise ConfigError(f"{config.model_type} {name} must list {count} booleans, got {values!r}")
    return tuple(values)


def config_names(config: Any, name: str, default: Any, count: int, built) -> tuple[str, ...]:
    """``config.name``: ``count`` names, each one of ``built``."""
    values = getattr(config, name, default)
    if not isinstance(values, list | tuple) or len(values) != count:
        raise ConfigError(f"{config.model_type} {name} must list {count} names, got {values!r}")
    for value in values:
        if value not in built:
            raise ConfigError(
                f"{config.model_type} {name} {value!r} is not built by mobius; it builds "
                f"{sorted(built)}"
            )
    return tuple(values)


@dataclass
class AutoencoderKLLTXVideoConfig:
    in_channels: int = 3
    out_channels: int = 3
    latent_channels: int = 128
    block_out_channels: tuple[int, ...] = (128, 256, 512, 512)
    down_block_types: tuple[str, ...] = ("LTXVideoDownBlock3D",) * 4
    layers_per_block: tuple[int, ...] = (4, 3, 3, 3, 4)
    spatio_temporal_scaling: tuple[bool, ...] = (True, True, True, False)
    downsample_type: tuple[str, ...] = ("conv",) * 4
    decoder_block_out_channels: tuple[int, ...] = (128, 256, 512, 512)
    decoder_layers_per_block: tuple[int, ...] = (4, 3, 3, 3, 4)
    decoder_spatio_temporal_scaling: tuple[bool, ...] = (True, True, True, False)
    decoder_inject_noise: tuple[bool, ...] = (False,) * 5
    upsample_residual: tuple[bool, ...] = (False,) * 4
    upsample_factor: tuple[int, ...] = (1,) * 4
    timestep_conditioning: bool = False
    patch_size: int = 4
    resnet_norm_eps: float = 1e-6
    encoder_causal: bool = True
    decoder_causal: bool = False

    @classmethod
    def from_hf(cls, config: Any) -> AutoencoderKLLTXVideoConfig:
        name = config.model_type
        if config_int(config, "patch_size_t", 1) != 1:
            raise ConfigError(f"{name} patch_size_t other than 1 is not built by mobius")
        blocks = config_ints(config, "block_out_channels", cls.block_out_channels)
        types = getattr(config, "down_block_types", cls.down_block_types)
        count = len(blocks) - (1 if types and types[-1] == DOWN_BLOCKS[1] else 0)
        decoder = config_ints(config, "decoder_block_out_channels", cls.decoder_block_out_channels)
        ups = len(decoder)
        c = cls(
            in_channels=config_int(config, "in_channels", 3),
            out_channels=config_int(config, "out_channels", 3),
            latent_channels=config_int(config, "latent_channels", 128),
            block_out_channels=blocks,
            down_block_types=config_names(config, "down_block_types", types, count, DOWN_BLOCKS),
            layers_per_block=config_ints(
                config, "layers_per_block", cls.layers_per_block, count + 1, low=0
            ),
            spatio_temporal_scaling=config_bools(
                config, "spatio_temporal_scaling", cls.spatio_temporal_scaling, count
            ),
            downsample_type=config_names(
                config, "downsample_type", cls.downsample_type, count, DOWNSAMPLES
            ),
            decoder_block_out_channels=decoder,
            decoder_layers_per_block=config_ints(
                config, "decoder_layers_per_block", cls.decoder_layers_per_block, ups + 1, low=0
            ),
            decoder_spatio_temporal_scaling=config_bools(
                config, "decoder_spatio_temporal_scaling", cls.spatio_temporal_scaling, ups
            ),
            decoder_inject_noise=config_bools(
                config, "decoder_inject_noise", cls.decoder_inject_noise, ups + 1
            ),
            upsample_residual=config_bools(config, "upsample_residual", cls.upsample_residual, ups),
            upsample_factor=config_ints(config, "upsample_factor", cls.upsample_factor, ups),
            timestep_conditioning=config_bool(config, "timestep_conditioning", False),
            patch_size=config_int(config, "patch_size", 4),
            resnet_norm_eps=config_float(config, "resnet_norm_eps", 1e-6),
            encoder_causal=config_bool(config, "encoder_causal", True),
            decoder_causal=config_bool(config, "decoder_causal", False),
        )
        for i, (cin, cout, factor) in enumerate(c.up_channels()):
            noisy = c.decoder_inject_noise[-2 - i]  # diffusers reverses the decoder's lists
            if cin != cout and (factor > 1 or noisy or c.timestep_conditioning):
                raise ConfigError(  # diffusers' conv_in gets the wrong input there
                    f"{name} up block {i} changes channels ({cin} -> {cout}) with "
                    "upsample_factor > 1, noise or timestep_conditioning: diffusers cannot run it"
                )
        return c

    def up_channels(self) -> list[tuple[int, int, int]]:
        """Each up block's ``(in, out, upsample factor)`` as diffusers sizes them."""
        channels, out = [], self.decoder_block_out_channels[-1]
        for block, factor in zip(
            reversed(self.decoder_block_out_channels), reversed(self.upsample_factor), strict=True
        ):
            channels.append((out // factor, block // factor, factor))
            out = block // factor
        return channels


class Encoder3d(nn.Module):
    def __init__(self, c: AutoencoderKLLTXVideoConfig) -> None:
        super().__init__()
        self.patch = c.patch_size
        blocks, causal, eps = c.block_out_channels, c.encoder_causal, c.resnet_norm_eps
        self.conv_in = CausalConv3d(c.in_channels * c.patch_size**2, blocks[0], is_causal=causal)
        is_095 = c.down_block_types[-1] == DOWN_BLOCKS[1]
        count = len(blocks) - is_095
        self.down_blocks = nn.ModuleList()
        out = blocks[0]
        for i in range(count):
            cin, out = out, blocks[i + 1] if i + 1 < len(blocks) else blocks[i]
            newer = c.down_block_types[i] == DOWN_BLOCKS[1]
            self.down_blocks.append(
                DownBlock3D(
                    cin,
                    out,
                    c.layers_per_block[i],
                    eps,
                    c.spatio_temporal_scaling[i],
                    causal,
                    c.downsample_type[i] if newer else None,
                )  # fmt: skip
            )
        self.mid_block = MidBlock3d(out, c.layers_per_block[-1], eps, causal)
        self.conv_out = CausalConv3d(out, c.latent_channels + 1, is_causal=causal)
        self.latent_channels = c.latent_channels

    def patchify(self, op, x):
        """``[b, c, t, H, W]`` -> ``[b, c * p * p, t, H/p, W/p]``, channels (c, column, row)."""
        b, c, t, h, w = sizes(op, x)
        p = _ints(op, [self.patch])
        rows, columns = op.Div(h, p), op.Div(w, p)
        x = op.Reshape(x, op.Concat(b, c, t, rows, p, columns, p, axis=0))
        x = op.Transpose(x, perm=[0, 1, 6, 4, 2, 3, 5])
        return op.Reshape(x, op.Concat(b, _ints(op, [-1]), t, rows, columns, axis=0))

    def forward(self, op, x):
        x = self.conv_in(op, self.patchify(op, x))
        for block in self.down_blocks:
            x = block(op, x)
        x = self.conv_out(op, silu(op, channel_rms(op, self.mid_block(op, x))))
        logvar = op.Slice(x, _ints(op, [-1]), _ints(op, [2**62]), _ints(op, [1]))
        repeated = op.Tile(logvar, _ints(op, [1, self.latent_channels - 1, 1, 1, 1]))
        return op.Concat(x, repeated, axis=1)


class Decoder3d(nn.Module):
    def __init__(self, c: AutoencoderKLLTXVideoConfig) -> None:
        super().__init__()
        ups, causal, eps = len(c.decoder_block_out_channels), c.decoder_causal, c.resnet_norm_eps
        layers = c.decoder_layers_per_block[::-1]  # diffusers' lists run from the image up
        noise = c.decoder_inject_noise[::-1]
        scaling = c.decoder_spatio_temporal_scaling[::-1]
        residual = c.upsample_residual[::-1]
        tc = c.timestep_conditioning
        first = c.decoder_block_out_channels[-1]
        self.conv_in = CausalConv3d(c.latent_channels, first, is_causal=causal)
        self.mid_block = MidBlock3d(first, layers[0], eps, causal, noise[0], tc)
        self.up_blocks = nn.ModuleList()
        for i, (cin, cout, factor) in enumerate(c.up_channels()):
            self.up_blocks.append(
                UpBlock3d(
                    cin,
                    cout,
                    layers[i + 1],
                    eps,
                    scaling[i],
                    causal,
                    noise[i + 1],
                    tc,
                    residual[i],
                    factor,
                )  # fmt: skip
            )
        out = c.up_channels()[-1][1]
        self.conv_out = CausalConv3d(out, c.out_channels * c.patch_size**2, is_causal=causal)
        self.timestep_scale_multiplier = self.time_embedder = self.scale_shift_table = None
        if tc:
            self.timestep_scale_multiplier = nn.Parameter([])
            self.time_embedder = PixArtAlphaCombinedTimestepSizeEmbeddings(2 * out, False)
            self.scale_shift_table = nn.Parameter([2, out])
        self.patch = c.patch_size
        # (noise draws, doublings before them) per draw, in diffusers' order
        self.noise_levels = [0] * (2 * layers[0] * noise[0])
        doublings = 0
        for i in range(ups):
            doublings += scaling[i]
            self.noise_levels += [doublings] * (2 * layers[i + 1] * noise[i + 1])

    def unpatchify(self, op, x):
        """``[b, c * p * p, t, h, w]`` -> ``[b, c, t, h * p, w * p]``."""
        b, _, t, h, w = sizes(op, x)
        p = self.patch
        x = op.Reshape(x, op.Concat(b, _ints(op, [-1, p, p]), t, h, w, axis=0))
        x = op.Transpose(x, perm=[0, 1, 4, 5, 3, 6, 2])  # [b, c, t, h, p (row), w, p (column)]
        size = [op.Mul(h, _ints(op, [p])), op.Mul(w, _ints(op, [p]))]
        return op.Reshape(x, op.Concat(b, _ints(op, [-1]), t, *size, axis=0))

    def forward(self, op, x, timestep=None, noise=()):
        draws = iter(noise)
        x = self.conv_in(op, x)
        if self.timestep_scale_multiplier is not None:
            timestep = op.Mul(op.CastLike(timestep, x), self.timestep_scale_multiplier)
        x = self.mid_block(op, x, timestep, draws)
        for block in self.up_blocks:
            x = block(op, x, timestep, draws)
        x = channel_rms(op, x)
        if self.time_embedder is not None:
            temb = self.time_embedder(op, timestep, x)
            shift, scale = modulation(op, self.scale_shift_table, temb, 2)
            x = op.Add(op.Mul(x, op.Add(scale, 1.0)), shift)
        return self.unpatchify(op, self.conv_out(op, silu(op, x)))


class AutoencoderKLLTXVideo(Model):
    """diffusers' ``AutoencoderKLLTXVideo``; see the module docstring for the graphs."""

    config_class = AutoencoderKLLTXVideoConfig
    task = "vae"

    def __init__(self, config: AutoencoderKLLTXVideoConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = Encoder3d(config)
        self.decoder = Decoder3d(config)
        self.latents_mean = nn.Parameter([config.latent_channels])
        self.latents_std = nn.Parameter([config.latent_channels])

    def forward(self, op):
        """``latents/model``: the statistics (a call of the root, so that they keep their names)."""
        return {
            "mean": op.Identity(self.latents_mean),
            "std": op.Identity(self.latents_std),
        }

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        video = ["batch", c.in_channels, "frames", "height", "width"]
        latent = ["latent_frames", "latent_height", "latent_width"]
        decoder_inputs = {"latent_sample": (None, ["batch", c.latent_channels, *latent])}
        if c.timestep_conditioning:
            decoder_inputs["timestep"] = (None, ["batch"])
        for i, level in enumerate(self.decoder.noise_levels):
            rows = "latent_height" if not level else f"latent_height_x{2**level}"
            columns = "latent_width" if not level else f"latent_width_x{2**level}"
            decoder_inputs[f"noise.{i}"] = (None, [rows, columns])

        def decode(op, latent_sample, timestep=None, **noise):
            draws = [noise[f"noise.{i}"] for i in range(len(noise))]
            return {"sample": self.decoder(op, latent_sample, timestep, draws)}

        channels = [c.latent_channels]
        return {
            "encoder/model": GraphSpec(
                {"sample": (None, video)},
                {"latent_parameters": ["batch", 2 * c.latent_channels, *latent]},
                lambda op, sample: {"latent_parameters": self.encoder(op, sample)},
            ),
            "decoder/model": GraphSpec(
                decoder_inputs,
                {"sample": ["batch", c.out_channels, "frames", "height", "width"]},
                decode,
            ),
            "latents/model": GraphSpec({}, {"mean": channels, "std": channels}, self),
        }


MODEL_TYPES = {"AutoencoderKLLTXVideo": AutoencoderKLLTXVideo}
