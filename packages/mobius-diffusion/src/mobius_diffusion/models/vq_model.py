"""VQModel: the vector-quantised autoencoder of Kandinsky 2.1/2.2 (MoVQ) and of VQ-diffusion.

The encoder is AutoencoderKL's with ``AttnDownEncoderBlock2D`` allowed (an
attention over pixels after each resnet) and ``latent_channels`` out, then
``quant_conv``. The decoder is ``post_quant_conv``, ``conv_in``, a mid-block,
up blocks (``AttnUpDecoderBlock2D`` allowed), a norm, SiLU and ``conv_out``; with
``norm_type="spatial"`` (MoVQ) every norm of the decoder is a ``SpatialNorm``: a
GroupNorm whose scale and shift are 1x1 convs of the quantised latents, resized
(nearest) to the features. Graphs (:class:`mobius.tasks.VAETask`): ``encoder/model``
``sample`` -> ``latent`` (``encode().latents``: before quantisation, as the
pipelines use them) and ``decoder/model`` ``latent_sample`` -> ``sample``
(``decode(force_not_quantize=True)``, as every pipeline calls it: the latents
themselves condition the spatial norms). The codebook (``quantize.embedding``) is
read by neither, so it is left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Conv2d, GroupNorm
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._checks import config_choice, config_int, config_ints, per_block
from mobius_diffusion.models._resnet import (
    AttentionBlock,
    DownBlock2D,
    ResnetBlock2D,
    UNetMidBlock2D,
    Upsample2D,
    activation,
)
from mobius_diffusion.models._spatial_norm import (
    SPATIAL_NORM_GROUPS,
    ResnetBlockCondNorm2D,
    SpatialAttentionBlock,
    SpatialNorm,
)
from mobius_diffusion.tasks import GraphSpec

_EPS = 1e-6  # diffusers' Encoder and Decoder fix every norm's epsilon
_DOWN = ("DownEncoderBlock2D", "AttnDownEncoderBlock2D")
_UP = ("UpDecoderBlock2D", "AttnUpDecoderBlock2D")


@dataclass
class VQModelConfig:
    in_channels: int = 3
    out_channels: int = 3
    block_out_channels: tuple[int, ...] = (64,)
    down_attention: tuple[bool, ...] = (False,)
    up_attention: tuple[bool, ...] = (False,)
    layers_per_block: int = 1
    act_fn: str = "silu"
    latent_channels: int = 3
    vq_embed_dim: int = 3
    norm_num_groups: int = 32
    norm_type: str = "group"
    mid_block_add_attention: bool = True

    @classmethod
    def from_hf(cls, config: Any) -> VQModelConfig:
        widths = config_ints(config, "block_out_channels", [64])
        down = per_block(config, "down_block_types", [_DOWN[0]] * len(widths), len(widths), _DOWN)
        up = per_block(config, "up_block_types", [_UP[0]] * len(widths), len(widths), _UP)
        latent = config_int(config, "latent_channels", 3)
        vq_dim = getattr(config, "vq_embed_dim", None)
        vq_dim = latent if vq_dim is None else config_int(config, "vq_embed_dim")
        norm_type = config_choice(config, "norm_type", "group", ("group", "spatial"))
        if getattr(config, "lookup_from_codebook", False):
            raise ConfigError(
                "VQModel lookup_from_codebook=True (decoding codebook indices) is not built by mobius"
            )
        if norm_type == "spatial" and vq_dim != latent:
            raise ConfigError(
                f"VQModel norm_type 'spatial' needs vq_embed_dim == latent_channels, "
                f"got {vq_dim} and {latent}"
            )
        act_fn = getattr(config, "act_fn", "silu")
        activation(act_fn)
        groups = config_int(config, "norm_num_groups", 32)
        split = (SPATIAL_NORM_GROUPS,) if norm_type == "spatial" else ()
        for width in widths:
            if any(width % g for g in (groups, *split)):
                raise ConfigError(
                    f"VQModel block_out_channels {list(widths)} do not split into the norms' "
                    f"{sorted({groups, *split})} groups"
                )
        return cls(
            in_channels=config_int(config, "in_channels", 3),
            out_channels=config_int(config, "out_channels", 3),
            block_out_channels=widths,
            down_attention=tuple(t == _DOWN[1] for t in down),
            up_attention=tuple(t == _UP[1] for t in up),
            layers_per_block=config_int(config, "layers_per_block", 1),
            act_fn=act_fn,
            latent_channels=latent,
            vq_embed_dim=vq_dim,
            norm_num_groups=groups,
            norm_type=norm_type,
            mid_block_add_attention=bool(getattr(config, "mid_block_add_attention", True)),
        )


class AttnDownEncoderBlock2D(DownBlock2D):
    """``DownBlock2D`` (no time embedding) with one-head attention over pixels after each resnet."""

    def __init__(self, in_channels, out_channels, layers, groups, act_fn, add_downsample) -> None:
        super().__init__(
            in_channels, out_channels, layers, None, groups, _EPS, act_fn, add_downsample, 0
        )
        self.attentions = nn.ModuleList(
            [AttentionBlock(out_channels, out_channels, groups, _EPS) for _ in range(layers)]
        )

    def layer(self, op, i, x, temb, context):
        return self.attentions[i](op, super().layer(op, i, x, temb, context))


class Encoder(nn.Module):
    def __init__(self, c: VQModelConfig) -> None:
        super().__init__()
        widths = c.block_out_channels
        self.act = activation(c.act_fn)
        self.conv_in = Conv2d(c.in_channels, widths[0], 3, padding=1)
        self.down_blocks = nn.ModuleList(
            [
                AttnDownEncoderBlock2D(
                    widths[max(i - 1, 0)],
                    width,
                    c.layers_per_block,
                    c.norm_num_groups,
                    c.act_fn,
                    add_downsample=i < len(widths) - 1,
                )
                if c.down_attention[i]
                else DownBlock2D(
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
        self.mid_block = UNetMidBlock2D(
            widths[-1],
            None,
            c.norm_num_groups,
            _EPS,
            c.act_fn,
            add_attention=c.mid_block_add_attention,
            attention_head_dim=widths[-1],
        )
        self.conv_norm_out = GroupNorm(c.norm_num_groups, widths[-1], _EPS)
        self.conv_out = Conv2d(widths[-1], c.latent_channels, 3, padding=1)

    def forward(self, op, x):
        x = self.conv_in(op, x)
        for block in self.down_blocks:
            x, _ = block(op, x)
        x = self.mid_block(op, x)
        return self.conv_out(op, self.act(op, self.conv_norm_out(op, x)))


class DecoderBlocks:
    """The decoder's resnets, attentions and norms: spatial norms of ``zq`` or GroupNorms.

    Each resnet and attention is called ``(op, x, zq)``; the GroupNorm ones get ``zq=None``,
    which ``ResnetBlock2D`` (no time projection) and ``AttentionBlock`` ignore.
    """

    def __init__(self, c: VQModelConfig) -> None:
        self.c, self.spatial = c, c.norm_type == "spatial"

    def resnet(self, in_channels: int, out_channels: int) -> nn.Module:
        c = self.c
        if self.spatial:
            return ResnetBlockCondNorm2D(in_channels, out_channels, c.latent_channels, c.act_fn)
        return ResnetBlock2D(in_channels, out_channels, None, c.norm_num_groups, _EPS, c.act_fn)

    def attention(self, channels: int) -> nn.Module:
        if self.spatial:
            return SpatialAttentionBlock(channels, self.c.latent_channels)
        return AttentionBlock(channels, channels, self.c.norm_num_groups, _EPS)


class MidBlock(nn.Module):
    """A resnet, then (attention, resnet)."""

    def __init__(self, blocks: DecoderBlocks, channels: int, add_attention: bool) -> None:
        super().__init__()
        self.resnets = nn.ModuleList([blocks.resnet(channels, channels) for _ in range(2)])
        self.attentions = nn.ModuleList([blocks.attention(channels)] if add_attention else [])

    def forward(self, op, x, zq):
        x = self.resnets[0](op, x, zq)
        if len(self.attentions):
            x = self.attentions[0](op, x, zq)
        return self.resnets[1](op, x, zq)


class UpDecoderBlock2D(nn.Module):
    """Resnets (each followed by an attention in ``AttnUpDecoderBlock2D``), then an optional upsample."""

    def __init__(
        self, blocks: DecoderBlocks, in_channels, out_channels, layers, attention, upsample
    ):
        super().__init__()
        self.resnets = nn.ModuleList(
            [
                blocks.resnet(in_channels if i == 0 else out_channels, out_channels)
                for i in range(layers)
            ]
        )
        self.attentions = (
            nn.ModuleList([blocks.attention(out_channels) for _ in range(layers)])
            if attention
            else None
        )
        self.upsamplers = nn.ModuleList([Upsample2D(out_channels)]) if upsample else None

    def forward(self, op, x, zq):
        for i, resnet in enumerate(self.resnets):
            x = resnet(op, x, zq)
            if self.attentions is not None:
                x = self.attentions[i](op, x, zq)
        return x if self.upsamplers is None else self.upsamplers[0](op, x)


class Decoder(nn.Module):
    def __init__(self, c: VQModelConfig) -> None:
        super().__init__()
        blocks, widths = DecoderBlocks(c), list(reversed(c.block_out_channels))
        self.act = activation(c.act_fn)
        self.conv_in = Conv2d(c.latent_channels, widths[0], 3, padding=1)
        self.mid_block = MidBlock(blocks, widths[0], c.mid_block_add_attention)
        self.up_blocks = nn.ModuleList(
            [
                UpDecoderBlock2D(
                    blocks,
                    widths[max(i - 1, 0)],
                    width,
                    c.layers_per_block + 1,
                    c.up_attention[i],
                    upsample=i < len(widths) - 1,
                )
                for i, width in enumerate(widths)
            ]
        )
        self.conv_norm_out = (
            SpatialNorm(widths[-1], c.latent_channels)
            if blocks.spatial
            else GroupNorm(c.norm_num_groups, widths[-1], _EPS)
        )
        self.conv_out = Conv2d(widths[-1], c.out_channels, 3, padding=1)

    def forward(self, op, z, zq=None):
        """``z`` after ``post_quant_conv``; ``zq`` (spatial norms only) the latents before it."""
        x = self.mid_block(op, self.conv_in(op, z), zq)
        for block in self.up_blocks:
            x = block(op, x, zq)
        x = self.conv_norm_out(op, x) if zq is None else self.conv_norm_out(op, x, zq)
        return self.conv_out(op, self.act(op, x))


class VQModel(Model):
    """diffusers' ``VQModel``: ``encoder/model`` (``latent``) and ``decoder/model``."""

    config_class = VQModelConfig
    task = "vae"
    ignored = ("quantize.embedding.weight",)  # the codebook: no graph quantises (see above)

    def __init__(self, config: VQModelConfig) -> None:
        super().__init__()
        self.config = c = config
        self.encoder = Encoder(c)
        self.quant_conv = Conv2d(c.latent_channels, c.vq_embed_dim, 1)
        self.post_quant_conv = Conv2d(c.vq_embed_dim, c.latent_channels, 1)
        self.decoder = Decoder(c)

    def decode(self, op, latent_sample):
        zq = latent_sample if self.config.norm_type == "spatial" else None
        return self.decoder(op, self.post_quant_conv(op, latent_sample), zq)

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        axes = ("latent_height", "latent_width")
        return {
            "encoder/model": GraphSpec(
                {"sample": (None, ["batch", c.in_channels, "height", "width"])},
                {"latent": ["batch", c.vq_embed_dim, *axes]},
                lambda op, sample: {"latent": self.quant_conv(op, self.encoder(op, sample))},
            ),
            "decoder/model": GraphSpec(
                {"latent_sample": (None, ["batch", c.vq_embed_dim, *axes])},
                {"sample": ["batch", c.out_channels, "height", "width"]},
                lambda op, latent_sample: {"sample": self.decode(op, latent_sample)},
            ),
        }


MODEL_TYPES = {"VQModel": VQModel}
