"""AutoencoderKLTemporalDecoder: Stable Video Diffusion's VAE, over videos ``[batch, channels, frames, h, w]``.

The encoder is AutoencoderKL's (each frame on its own) with ``quant_conv``; there is
no ``post_quant_conv``. The decoder (``TemporalDecoder``) is AutoencoderKL's with every
resnet a spatio-temporal one (:mod:`._spatio_temporal`: temporal epsilon 1e-5, the
mixer's sides swapped), and ``time_conv_out``, a 3x1x1 conv over the frames, after
``conv_out``. diffusers fixes 32 GroupNorm groups and SiLU. Its mid-block pairs one
attention with the resnets after the first, so only ``layers_per_block`` 2 (the
released VAE's) uses every weight: other values are refused.

Graphs (:class:`mobius.tasks.VAETask`): ``encoder/model`` ``sample`` [batch, 3, frames,
height, width] -> ``latent_parameters`` [batch, 2 * latent_channels, frames,
latent_height, latent_width]; ``decoder/model`` ``latent_sample`` [batch,
latent_channels, frames, latent_height, latent_width] -> ``sample``: each batch row is
one video whose frames the temporal layers mix (diffusers' ``decode(z, num_frames)``;
the pipeline's ``decode_chunk_size`` cuts the video into rows of its own).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Conv2d, Conv3d, GroupNorm
from mobius.errors import ConfigError
from mobius_diffusion.models._checks import config_int, config_ints, per_block
from mobius_diffusion.models._resnet import AttentionBlock, Upsample2D, activation
from mobius_diffusion.models._spatio_temporal import (
    GROUPS,
    SpatioTemporalResBlock,
    to_frames,
    to_video,
)
from mobius_diffusion.models.autoencoder_kl import AutoencoderKL, AutoencoderKLConfig

_EPS, _TEMPORAL_EPS = 1e-6, 1e-5


@dataclass
class AutoencoderKLTemporalDecoderConfig(AutoencoderKLConfig):
    use_post_quant_conv: bool = False

    @classmethod
    def from_hf(cls, config: Any) -> AutoencoderKLTemporalDecoderConfig:
        name = config.model_type
        widths = config_ints(config, "block_out_channels", (64,))
        per_block(
            config, "down_block_types", "DownEncoderBlock2D", len(widths), ("DownEncoderBlock2D",)
        )
        if any(width % GROUPS for width in widths):
            raise ConfigError(
                f"{name} block_out_channels {list(widths)} must split into {GROUPS} groups"
            )
        layers = config_int(config, "layers_per_block", 1)
        if layers != 2:
            raise ConfigError(
                f"{name} layers_per_block {layers}: diffusers' temporal mid-block then leaves "
                "weights unused; mobius builds 2 (the released VAE's)"
            )
        return cls(
            in_channels=config_int(config, "in_channels", 3),
            out_channels=config_int(config, "out_channels", 3),
            block_out_channels=widths,
            layers_per_block=layers,
            latent_channels=config_int(config, "latent_channels", 4),
            norm_num_groups=GROUPS,
        )


class MidBlockTemporalDecoder(nn.Module):
    """A resnet, attention over each frame's pixels (one head), a resnet."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.resnets = nn.ModuleList([_resnet(channels, channels) for _ in range(2)])
        self.attentions = nn.ModuleList([AttentionBlock(channels, channels, GROUPS, _EPS)])

    def forward(self, op, x, frames):
        x = self.attentions[0](op, self.resnets[0](op, x, None, frames))
        return self.resnets[1](op, x, None, frames)


class UpBlockTemporalDecoder(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, layers: int, add_upsample: bool):
        super().__init__()
        self.resnets = nn.ModuleList(
            [_resnet(in_channels if i == 0 else out_channels, out_channels) for i in range(layers)]
        )
        self.upsamplers = nn.ModuleList([Upsample2D(out_channels)]) if add_upsample else None

    def forward(self, op, x, frames):
        for resnet in self.resnets:
            x = resnet(op, x, None, frames)
        return x if self.upsamplers is None else self.upsamplers[0](op, x)


def _resnet(in_channels: int, out_channels: int) -> SpatioTemporalResBlock:
    return SpatioTemporalResBlock(in_channels, out_channels, None, _EPS, _TEMPORAL_EPS, True)


class TemporalDecoder(nn.Module):
    def __init__(self, c: AutoencoderKLTemporalDecoderConfig) -> None:
        super().__init__()
        widths = list(reversed(c.block_out_channels))
        self.conv_in = Conv2d(c.latent_channels, widths[0], 3, padding=1)
        self.mid_block = MidBlockTemporalDecoder(widths[0])
        self.up_blocks = nn.ModuleList(
            [
                UpBlockTemporalDecoder(
                    widths[max(i - 1, 0)], width, c.layers_per_block + 1, i < len(widths) - 1
                )
                for i, width in enumerate(widths)
            ]
        )
        self.conv_norm_out = GroupNorm(GROUPS, widths[-1], _EPS)
        self.act = activation("silu")
        self.conv_out = Conv2d(widths[-1], c.out_channels, 3, padding=1)
        self.time_conv_out = Conv3d(c.out_channels, c.out_channels, (3, 1, 1), padding=(1, 0, 0))

    def forward(self, op, z):
        """``z`` [b, c, f, h, w] -> ``[b, out_channels, f, H, W]``."""
        frames = op.Shape(z, start=2, end=3)
        x = self.mid_block(op, self.conv_in(op, to_frames(op, z)), frames)
        for block in self.up_blocks:
            x = block(op, x, frames)
        x = self.conv_out(op, self.act(op, self.conv_norm_out(op, x)))
        return self.time_conv_out(op, to_video(op, x, frames))


class AutoencoderKLTemporalDecoder(AutoencoderKL):
    """diffusers' ``AutoencoderKLTemporalDecoder``: ``encoder/model`` and ``decoder/model``."""

    config_class = AutoencoderKLTemporalDecoderConfig
    decoder_class = TemporalDecoder
    sample_axes = ("frames", "height", "width")
    latent_axes = ("frames", "latent_height", "latent_width")

    def encode(self, op, sample):
        """AutoencoderKL's encoder and ``quant_conv`` on each frame."""
        frames = op.Shape(sample, start=2, end=3)
        return to_video(op, super().encode(op, to_frames(op, sample)), frames)


MODEL_TYPES = {"AutoencoderKLTemporalDecoder": AutoencoderKLTemporalDecoder}
