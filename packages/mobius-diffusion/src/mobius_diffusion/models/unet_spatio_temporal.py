"""UNetSpatioTemporalConditionModel: the video denoiser of Stable Video Diffusion.

SDXL's UNet layout with every resnet a spatio-temporal one and every transformer a
spatio-temporal one (:mod:`._spatio_temporal`): ``conv_in``; down blocks
(``CrossAttnDownBlockSpatioTemporal``/``DownBlockSpatioTemporal``) keeping each state as
a skip; ``UNetMidBlockSpatioTemporal``; up blocks concatenating the skips back, newest
first; GroupNorm (32 groups), SiLU, ``conv_out``. The timestep's embedding plus
``add_embedding`` of the sinusoids of the added time ids (SVD's fps - 1, motion bucket
and noise augmentation) conditions every resnet, the same for every frame of a
video. diffusers fixes much of it: 32 GroupNorm groups, SiLU, resnet epsilons (1e-6 in
the cross-attention down blocks and all up blocks, 1e-5 elsewhere).

Graph (:class:`mobius.tasks.DenoisingTask`): ``sample`` [batch, frames, in_channels,
latent_height, latent_width], ``timestep`` float32 [batch] (one is broadcast to the
batch; SVD's scheduler passes ``log(sigma) / 4``), ``encoder_hidden_states`` [batch,
sequence, cross_attention_dim] (SVD: the CLIP image embedding, one token),
``added_time_ids`` [batch, ids] -> ``out_sample`` [batch, frames, out_channels,
latent_height, latent_width]. Latent sizes that are not a multiple of the total
downscale upsample to the skips' sizes, as diffusers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv2d, GroupNorm
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._checks import config_int, config_ints, per_block
from mobius_diffusion.models._embeddings import TimestepEmbedding, Timesteps
from mobius_diffusion.models._resnet import Downsample2D, Upsample2D, activation
from mobius_diffusion.models._spatio_temporal import (
    GROUPS,
    SpatioTemporalResBlock,
    TransformerSpatioTemporalModel,
    _ints,
)
from mobius_diffusion.tasks import GraphSpec

_DOWN = ("CrossAttnDownBlockSpatioTemporal", "DownBlockSpatioTemporal")
_UP = ("CrossAttnUpBlockSpatioTemporal", "UpBlockSpatioTemporal")


def _ints_per_block(config: Any, name: str, default: Any, count: int) -> tuple[int, ...]:
    """One positive int for every block, or a list of ``count`` of them."""
    if isinstance(getattr(config, name, default), int | bool):
        return (config_int(config, name, default),) * count
    return config_ints(config, name, default, count=count)


@dataclass
class UNetSpatioTemporalConfig:
    in_channels: int = 8
    out_channels: int = 4
    down_block_types: tuple[str, ...] = ()
    up_block_types: tuple[str, ...] = ()
    block_out_channels: tuple[int, ...] = (320, 640, 1280, 1280)
    addition_time_embed_dim: int = 256
    projection_class_embeddings_input_dim: int = 768
    layers_per_block: tuple[int, ...] = (2, 2, 2, 2)
    cross_attention_dim: tuple[int, ...] = (1024,) * 4
    transformer_layers_per_block: tuple[int, ...] = (1, 1, 1, 1)
    num_attention_heads: tuple[int, ...] = (5, 10, 20, 20)

    @classmethod
    def from_hf(cls, config: Any) -> UNetSpatioTemporalConfig:
        name = config.model_type
        widths = config_ints(config, "block_out_channels", (320, 640, 1280, 1280))
        n = len(widths)
        down = per_block(config, "down_block_types", None, n, _DOWN)
        up = per_block(config, "up_block_types", None, n, _UP)
        layers = _ints_per_block(config, "layers_per_block", 2, n)
        cross = _ints_per_block(config, "cross_attention_dim", 1024, n)
        depths = getattr(config, "transformer_layers_per_block", 1)
        if isinstance(depths, (list, tuple)) and any(isinstance(d, (list, tuple)) for d in depths):
            raise ConfigError(
                f"{name} transformer_layers_per_block per layer is not built by mobius"
            )
        depths = _ints_per_block(config, "transformer_layers_per_block", 1, n)
        if len(set(cross)) > 1:  # one image embedding feeds every block
            raise ConfigError(f"{name} cross_attention_dim per block {list(cross)} is not built")
        heads = _ints_per_block(config, "num_attention_heads", (5, 10, 20, 20), n)
        for width, head in zip(widths, heads, strict=True):
            if width % GROUPS or width % head:
                raise ConfigError(
                    f"{name} block width {width} must split into {GROUPS} GroupNorm groups "
                    f"and {head} heads"
                )
        time_dim = config_int(config, "addition_time_embed_dim", 256)
        added = config_int(config, "projection_class_embeddings_input_dim", 768)
        if added % time_dim:
            raise ConfigError(
                f"{name} projection_class_embeddings_input_dim {added} is not a whole number "
                f"of addition_time_embed_dim {time_dim} ids"
            )
        return cls(
            in_channels=config_int(config, "in_channels", 8),
            out_channels=config_int(config, "out_channels", 4),
            down_block_types=down,
            up_block_types=up,
            block_out_channels=widths,
            addition_time_embed_dim=time_dim,
            projection_class_embeddings_input_dim=added,
            layers_per_block=layers,
            cross_attention_dim=cross,
            transformer_layers_per_block=depths,
            num_attention_heads=heads,
        )

    @property
    def time_embed_dim(self) -> int:
        return self.block_out_channels[0] * 4

    @property
    def time_ids(self) -> int:
        """How many added time ids the UNet takes (SVD: fps, motion bucket, noise augmentation)."""
        return self.projection_class_embeddings_input_dim // self.addition_time_embed_dim


class DownBlockSpatioTemporal(nn.Module):
    """Spatio-temporal resnets, then an optional stride-2 ``Downsample2D``; the output and every state."""

    def __init__(
        self, in_channels, out_channels, layers, temb_channels, eps, add_downsample
    ) -> None:
        super().__init__()
        self.resnets = nn.ModuleList(
            [
                SpatioTemporalResBlock(
                    in_channels if i == 0 else out_channels, out_channels, temb_channels, eps
                )
                for i in range(layers)
            ]
        )
        self.downsamplers = (
            nn.ModuleList([Downsample2D(out_channels, out_channels)]) if add_downsample else None
        )

    def layer(self, op, i, x, temb, context, frames):
        return self.resnets[i](op, x, temb, frames)

    def forward(self, op, x, temb, context, frames):
        states = []
        for i in range(len(self.resnets)):
            x = self.layer(op, i, x, temb, context, frames)
            states.append(x)
        if self.downsamplers is not None:
            x = self.downsamplers[0](op, x)
            states.append(x)
        return x, states


class UpBlockSpatioTemporal(nn.Module):
    """Spatio-temporal resnets, each after concatenating the next skip; an optional ``Upsample2D``."""

    def __init__(self, resnet_in_channels, out_channels, temb_channels, eps, add_upsample) -> None:
        super().__init__()
        self.resnets = nn.ModuleList(
            [
                SpatioTemporalResBlock(c, out_channels, temb_channels, eps)
                for c in resnet_in_channels
            ]
        )
        self.upsamplers = nn.ModuleList([Upsample2D(out_channels)]) if add_upsample else None

    def layer(self, op, i, x, temb, context, frames):
        return self.resnets[i](op, x, temb, frames)

    def forward(self, op, x, temb, context, frames, skips, upsample_like=None):
        skips = list(skips)
        for i in range(len(self.resnets)):
            x = self.layer(op, i, op.Concat(x, skips.pop(), axis=1), temb, context, frames)
        if self.upsamplers is not None:
            x = self.upsamplers[0](op, x, upsample_like)
        return x


def _transformers(channels: int, heads: int, depth: int, cross: int, count: int):
    return nn.ModuleList(
        [TransformerSpatioTemporalModel(heads, channels, depth, cross) for _ in range(count)]
    )


class CrossAttnDownBlockSpatioTemporal(DownBlockSpatioTemporal):
    """``DownBlockSpatioTemporal`` with a spatio-temporal transformer after each resnet."""

    def __init__(self, heads, depth, cross, in_channels, out_channels, layers, *args) -> None:
        super().__init__(in_channels, out_channels, layers, *args)
        self.attentions = _transformers(out_channels, heads, depth, cross, layers)

    def layer(self, op, i, x, temb, context, frames):
        x = super().layer(op, i, x, temb, context, frames)
        return self.attentions[i](op, x, context, frames)


class CrossAttnUpBlockSpatioTemporal(UpBlockSpatioTemporal):
    """``UpBlockSpatioTemporal`` with a spatio-temporal transformer after each resnet."""

    def __init__(self, heads, depth, cross, resnet_in_channels, out_channels, *args) -> None:
        super().__init__(resnet_in_channels, out_channels, *args)
        count = len(resnet_in_channels)
        self.attentions = _transformers(out_channels, heads, depth, cross, count)

    def layer(self, op, i, x, temb, context, frames):
        x = super().layer(op, i, x, temb, context, frames)
        return self.attentions[i](op, x, context, frames)


class UNetMidBlockSpatioTemporal(nn.Module):
    """A resnet, a transformer, a resnet."""

    def __init__(self, channels, temb_channels, heads, depth, cross) -> None:
        super().__init__()
        self.resnets = nn.ModuleList(
            [SpatioTemporalResBlock(channels, channels, temb_channels, 1e-5) for _ in range(2)]
        )
        self.attentions = _transformers(channels, heads, depth, cross, 1)

    def forward(self, op, x, temb, context, frames):
        x = self.resnets[0](op, x, temb, frames)
        x = self.attentions[0](op, x, context, frames)
        return self.resnets[1](op, x, temb, frames)


class UNetSpatioTemporalConditionModel(Model):
    """diffusers' ``UNetSpatioTemporalConditionModel`` (Stable Video Diffusion)."""

    config_class = UNetSpatioTemporalConfig
    task = "denoising"

    def __init__(self, config: UNetSpatioTemporalConfig) -> None:
        super().__init__()
        self.config = c = config
        widths, temb = c.block_out_channels, c.time_embed_dim
        self.conv_in = Conv2d(c.in_channels, widths[0], 3, padding=1)
        self.time_proj = Timesteps(widths[0], True, 0)
        self.time_embedding = TimestepEmbedding(widths[0], temb)
        self.add_time_proj = Timesteps(c.addition_time_embed_dim, True, 0)
        self.add_embedding = TimestepEmbedding(c.projection_class_embeddings_input_dim, temb)
        self.down_blocks = nn.ModuleList([self.make_down_block(i) for i in range(len(widths))])
        self.mid_block = UNetMidBlockSpatioTemporal(
            widths[-1],
            temb,
            c.num_attention_heads[-1],
            c.transformer_layers_per_block[-1],
            c.cross_attention_dim[-1],
        )
        self.up_blocks = nn.ModuleList([self.make_up_block(i) for i in range(len(widths))])
        self.conv_norm_out = GroupNorm(GROUPS, widths[0], 1e-5)
        self.act = activation("silu")
        self.conv_out = Conv2d(widths[0], c.out_channels, 3, padding=1)

    def make_down_block(self, i: int) -> DownBlockSpatioTemporal:
        c, widths = self.config, self.config.block_out_channels
        last = i == len(widths) - 1
        args = (widths[max(i - 1, 0)], widths[i], c.layers_per_block[i], c.time_embed_dim)
        if c.down_block_types[i] == "DownBlockSpatioTemporal":
            return DownBlockSpatioTemporal(*args, 1e-5, not last)
        attention = (
            c.num_attention_heads[i],
            c.transformer_layers_per_block[i],
            c.cross_attention_dim[i],
        )
        return CrossAttnDownBlockSpatioTemporal(*attention, *args, 1e-6, not last)

    def make_up_block(self, i: int) -> UpBlockSpatioTemporal:
        c = self.config
        widths = list(reversed(c.block_out_channels))
        layers = list(reversed(c.layers_per_block))[i] + 1
        prev, out = widths[max(i - 1, 0)], widths[i]
        skip_last = widths[min(i + 1, len(widths) - 1)]
        in_channels = [
            (prev if j == 0 else out) + (skip_last if j == layers - 1 else out)
            for j in range(layers)
        ]
        args = (in_channels, out, c.time_embed_dim, 1e-6, i < len(widths) - 1)
        if c.up_block_types[i] == "UpBlockSpatioTemporal":
            return UpBlockSpatioTemporal(*args)
        j = len(widths) - 1 - i  # the block's settings, read from the down side
        attention = (
            c.num_attention_heads[j],
            c.transformer_layers_per_block[j],
            c.cross_attention_dim[j],
        )
        return CrossAttnUpBlockSpatioTemporal(*attention, *args)

    def embed_time(self, op, sample, timestep, added_time_ids):
        """The time embedding plus the added ids' embedding, ``[batch, time_embed_dim]``."""
        batch = op.Shape(sample, start=0, end=1)
        t = op.Expand(op.Reshape(timestep, _ints(op, [-1])), batch)
        emb = self.time_embedding(op, self.time_proj(op, t, sample))
        ids = self.add_time_proj(op, op.Reshape(added_time_ids, _ints(op, [-1])), sample)
        ids = op.Reshape(ids, op.Concat(batch, _ints(op, [-1]), axis=0))
        return op.Add(emb, self.add_embedding(op, ids))

    def forward(self, op, sample, timestep, encoder_hidden_states, added_time_ids):
        frames = op.Shape(sample, start=1, end=2)
        emb = self.embed_time(op, sample, timestep, added_time_ids)

        def per_frame(x):  # [b, ...] -> [b * f, ...], each row repeated for its frames
            rest = op.Shape(x, start=1)
            shape = op.Concat(op.Shape(x, start=0, end=1), frames, rest, axis=0)
            repeated = op.Expand(op.Unsqueeze(x, [1]), shape)
            return op.Reshape(repeated, op.Concat(_ints(op, [-1]), rest, axis=0))

        emb, context = per_frame(emb), per_frame(encoder_hidden_states)
        x = op.Reshape(sample, op.Concat(_ints(op, [-1]), op.Shape(sample, start=2), axis=0))
        x = self.conv_in(op, x)  # [b * f, c, h, w]
        skips = [x]
        for block in self.down_blocks:
            x, states = block(op, x, emb, context, frames)
            skips += states
        x = self.mid_block(op, x, emb, context, frames)
        for block in self.up_blocks:
            n = len(block.resnets)
            skips, mine = skips[:-n], skips[-n:]
            like = skips[-1] if skips else None
            x = block(op, x, emb, context, frames, mine, upsample_like=like)
        x = self.conv_out(op, self.act(op, self.conv_norm_out(op, x)))
        shape = op.Concat(_ints(op, [-1]), frames, op.Shape(x, start=1), axis=0)
        return op.Reshape(x, shape)  # [b, f, out, h, w]

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        latent = ["latent_height", "latent_width"]
        inputs = {
            "sample": (None, ["batch", "frames", c.in_channels, *latent]),
            "timestep": (ir.DataType.FLOAT, ["batch"]),
            "encoder_hidden_states": (None, ["batch", "sequence", c.cross_attention_dim[0]]),
            "added_time_ids": (None, ["batch", c.time_ids]),
        }
        outputs = {"out_sample": ["batch", "frames", c.out_channels, *latent]}
        return {
            "model": GraphSpec(inputs, outputs, lambda op, **kw: {"out_sample": self(op, **kw)})
        }


MODEL_TYPES = {"UNetSpatioTemporalConditionModel": UNetSpatioTemporalConditionModel}
