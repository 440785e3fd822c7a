"""AutoencoderKL: the VAE of Stable Diffusion 1.x/2.x, SDXL, SD3 and Flux.

Encoder: ``conv_in``, one ``DownEncoderBlock2D`` per width (resnets, a stride-2
conv except in the last), a mid-block (resnet, attention over pixels, resnet),
GroupNorm, SiLU, ``conv_out`` to ``2 * latent_channels``, then ``quant_conv``.
Decoder: ``post_quant_conv``, ``conv_in``, the mid-block, ``UpDecoderBlock2D``s
(``layers_per_block + 1`` resnets, a nearest 2x upsample and conv except in the
last), GroupNorm, SiLU, ``conv_out``. Graphs (:class:`mobius.tasks.VAETask`):
``encoder/model`` ``sample`` -> ``latent_parameters`` (diffusers'
``latent_dist.parameters``: mean and log-variance, unclamped, before any scaling
factor) and ``decoder/model`` ``latent_sample`` -> ``sample``. The scaling and
shift factors and the latent sampling belong to the pipeline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Conv2d, GroupNorm
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._resnet import DownBlock2D, UNetMidBlock2D, UpBlock2D, activation
from mobius_diffusion.tasks import GraphSpec

_EPS = 1e-6  # diffusers' Encoder and Decoder fix every norm's epsilon


@dataclass
class AutoencoderKLConfig:
    in_channels: int = 3
    out_channels: int = 3
    block_out_channels: tuple[int, ...] = (64,)
    layers_per_block: int = 1
    act_fn: str = "silu"
    latent_channels: int = 4
    norm_num_groups: int = 32
    use_quant_conv: bool = True
    use_post_quant_conv: bool = True
    mid_block_add_attention: bool = True

    @classmethod
    def from_hf(cls, config: Any) -> AutoencoderKLConfig:
        widths = tuple(config.block_out_channels)
        for key, kind in (
            ("down_block_types", "DownEncoderBlock2D"),
            ("up_block_types", "UpDecoderBlock2D"),
        ):
            types = list(getattr(config, key, [kind]))
            if set(types) != {kind} or len(types) != len(widths):
                raise ConfigError(
                    f"AutoencoderKL {key} {types} is not built by mobius: it builds one {kind} per "
                    f"block_out_channels entry"
                )
        activation(getattr(config, "act_fn", "silu"))
        return cls(
            in_channels=getattr(config, "in_channels", 3),
            out_channels=getattr(config, "out_channels", 3),
            block_out_channels=widths,
            layers_per_block=getattr(config, "layers_per_block", 1),
            act_fn=getattr(config, "act_fn", "silu"),
            latent_channels=getattr(config, "latent_channels", 4),
            norm_num_groups=getattr(config, "norm_num_groups", 32),
            use_quant_conv=getattr(config, "use_quant_conv", True),
            use_post_quant_conv=getattr(config, "use_post_quant_conv", True),
            mid_block_add_attention=getattr(config, "mid_block_add_attention", True),
        )


def _mid_block(c: AutoencoderKLConfig) -> UNetMidBlock2D:
    width = c.block_out_channels[-1]
    return UNetMidBlock2D(
        width,
        None,
        c.norm_num_groups,
        _EPS,
        c.act_fn,
        add_attention=c.mid_block_add_attention,
        attention_head_dim=width,  # one head over all channels
    )


class Encoder(nn.Module):
    def __init__(self, c: AutoencoderKLConfig) -> None:
        super().__init__()
        widths = c.block_out_channels
        self.act = activation(c.act_fn)
        self.conv_in = Conv2d(c.in_channels, widths[0], 3, padding=1)
        self.down_blocks = nn.ModuleList(
            [
                DownBlock2D(
                    widths[max(i - 1, 0)],
                    width,
                    c.layers_per_block,
                    None,
                    c.norm_num_groups,
                    _EPS,
                    c.act_fn,
                    add_downsample=i < len(widths) - 1,
                    downsample_padding=0,
                )
                for i, width in enumerate(widths)
            ]
        )
        self.mid_block = _mid_block(c)
        self.conv_norm_out = GroupNorm(c.norm_num_groups, widths[-1], _EPS)
        self.conv_out = Conv2d(widths[-1], 2 * c.latent_channels, 3, padding=1)

    def forward(self, op, x):
        x = self.conv_in(op, x)
        for block in self.down_blocks:
            x, _ = block(op, x)
        x = self.mid_block(op, x)
        return self.conv_out(op, self.act(op, self.conv_norm_out(op, x)))


class Decoder(nn.Module):
    def __init__(self, c: AutoencoderKLConfig) -> None:
        super().__init__()
        widths = list(reversed(c.block_out_channels))
        self.act = activation(c.act_fn)
        self.conv_in = Conv2d(c.latent_channels, widths[0], 3, padding=1)
        self.mid_block = _mid_block(c)
        self.up_blocks = nn.ModuleList(
            [
                UpBlock2D(
                    [widths[max(i - 1, 0)]] + [width] * c.layers_per_block,
                    width,
                    None,
                    c.norm_num_groups,
                    _EPS,
                    c.act_fn,
                    add_upsample=i < len(widths) - 1,
                )
                for i, width in enumerate(widths)
            ]
        )
        self.conv_norm_out = GroupNorm(c.norm_num_groups, widths[-1], _EPS)
        self.conv_out = Conv2d(widths[-1], c.out_channels, 3, padding=1)

    def forward(self, op, z):
        x = self.mid_block(op, self.conv_in(op, z))
        for block in self.up_blocks:
            x = block(op, x)
        return self.conv_out(op, self.act(op, self.conv_norm_out(op, x)))


#: Attention parameter names of checkpoints saved before diffusers 0.14 -> today's.
_DEPRECATED_ATTENTION = {"query": "to_q", "key": "to_k", "value": "to_v", "proj_attn": "to_out.0"}
_DEPRECATED_KEY = re.compile(r"(mid_block\.attentions\.\d+)\.(query|key|value|proj_attn)\.")


class AutoencoderKL(Model):
    """diffusers' ``AutoencoderKL``: ``encoder/model`` and ``decoder/model``.

    The video autoencoders subclass it with their own encoder, decoder, 1x1 conv and axes.
    """

    config_class = AutoencoderKLConfig
    task = "vae"
    encoder_class, decoder_class, conv_class = Encoder, Decoder, Conv2d
    #: The axes after the channels: of the pixels, and of the latents.
    sample_axes = ("height", "width")
    latent_axes = ("latent_height", "latent_width")

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        latent = config.latent_channels
        self.encoder = self.encoder_class(config)
        self.decoder = self.decoder_class(config)
        conv = self.conv_class
        self.quant_conv = conv(2 * latent, 2 * latent, 1) if config.use_quant_conv else None
        self.post_quant_conv = conv(latent, latent, 1) if config.use_post_quant_conv else None

    def sanitize(self, weights: dict) -> dict:
        """Rename the mid-block attention of old checkpoints (``query``, ``proj_attn``), as diffusers does."""
        return {
            _DEPRECATED_KEY.sub(lambda m: f"{m[1]}.{_DEPRECATED_ATTENTION[m[2]]}.", k): v
            for k, v in weights.items()
        }

    def encode(self, op, sample):
        moments = self.encoder(op, sample)
        return moments if self.quant_conv is None else self.quant_conv(op, moments)

    def decode(self, op, latent_sample):
        z = (
            latent_sample
            if self.post_quant_conv is None
            else self.post_quant_conv(op, latent_sample)
        )
        return self.decoder(op, z)

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        latent = ["batch", c.latent_channels, *self.latent_axes]
        return {
            "encoder/model": GraphSpec(
                {"sample": (None, ["batch", c.in_channels, *self.sample_axes])},
                {"latent_parameters": ["batch", 2 * c.latent_channels, *self.latent_axes]},
                lambda op, sample: {"latent_parameters": self.encode(op, sample)},
            ),
            "decoder/model": GraphSpec(
                {"latent_sample": (None, latent)},
                {"sample": ["batch", c.out_channels, *self.sample_axes]},
                lambda op, latent_sample: {"sample": self.decode(op, latent_sample)},
            ),
        }


MODEL_TYPES = {"AutoencoderKL": AutoencoderKL}
