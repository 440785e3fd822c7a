"""Kandinsky 3's UNet (``Kandinsky3UNet``): conditional group norms throughout, T5 cross-attention.

The T5 states are projected (``encoder_hid_proj``: a bias-free linear, then a
LayerNorm) and pooled into the time embedding by one attention: the mean of every
projected token (padding included, as diffusers) queries them under the mask
(``add_time_condition``). Every norm of the body is a weightless GroupNorm scaled
by ``1 + scale`` and shifted, both a linear of ``SiLU(time embedding)``. A resnet is
four such norm-SiLU-conv blocks (kernels 1, 3, 3, 1) through half the wider width,
plus a shortcut; the last resnet of a down level halves the grid (a stride-2 conv
in its third block and its shortcut), the first resnet of an up level but the
deepest doubles it (a stride-2 transposed conv in its second block and its
shortcut). Attention blocks over the pixels (a conditional norm, attention, then a
conditional norm and a 1x1-conv MLP of 4x width, both residual) sit between the
resnets of a level (cross-attention to the text, padding masked with
``(1 - mask) * -10000``) and before a down level or after an up level
(self-attention). diffusers fixes which levels attend: ``(False, True, True, True)``
in down order, and the same tuple reversed in up order (so a UNet of fewer than
four levels attends at every up level).

Module tree and names follow diffusers' checkpoints (an ``nn.Identity`` or a
parameterless position of an ``nn.Sequential`` is an empty module, so the indices
hold). Graph (:class:`mobius_diffusion.tasks.DenoisingTask`): ``sample`` [batch,
in_channels, latent_height, latent_width], ``timestep`` [batch],
``encoder_hidden_states`` [batch, sequence, encoder_hid_dim], ``encoder_attention_mask``
int64 [batch, sequence] -> ``out_sample``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv2d, GroupNorm
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._checks import config_int, config_ints
from mobius_diffusion.models._embeddings import TimestepEmbedding, Timesteps
from mobius_diffusion.models._kandinsky3_blocks import (
    COMPRESSION,
    EPS,
    Kandinsky3AttentionBlock,
    Kandinsky3AttentionPooling,
    Kandinsky3EncoderProj,
    Kandinsky3ResNetBlock,
    silu,
)
from mobius_diffusion.tasks import GraphSpec

#: Which levels attend, in down order (fixed in diffusers' code, not in the config).
_ATTENTION = (False, True, True, True)


def down_pairs(in_dim: int, out_dim: int, layers: int) -> tuple[list, list]:
    """``(in, out)`` channels of a down level's ``resnets_in`` and ``resnets_out``."""
    return [(in_dim, out_dim)] + [(out_dim, out_dim)] * (layers - 1), [(out_dim, out_dim)] * layers


def up_pairs(in_dim: int, cat: int, out_dim: int, layers: int) -> tuple[list, list]:
    """``(in, out)`` channels of an up level's ``resnets_in`` and ``resnets_out`` (skip of ``cat``)."""
    outs = [(in_dim + cat, in_dim)] + [(in_dim, in_dim)] * (layers - 2) + [(in_dim, out_dim)]
    return [(a, a) for a, _ in outs], outs


@dataclass
class Kandinsky3Config:
    in_channels: int = 4
    time_embedding_dim: int = 1536
    groups: int = 32
    attention_head_dim: int = 64
    layers_per_block: int = 3
    block_out_channels: tuple[int, ...] = (384, 768, 1536, 3072)
    cross_attention_dim: int = 4096
    encoder_hid_dim: int = 4096

    @classmethod
    def from_hf(cls, config: Any) -> Kandinsky3Config:
        name = config.model_type
        widths = config_ints(config, "block_out_channels", [384, 768, 1536, 3072])
        if len(widths) > len(_ATTENTION):  # diffusers zips its level lists to four
            raise ConfigError(f"{name} block_out_channels {list(widths)}: at most 4 levels")
        if config_int(config, "layers_per_block", 3) < 2:  # an up level of one resnet
            raise ConfigError(f"{name} layers_per_block must be at least 2 (diffusers' up levels)")
        c = cls(
            in_channels=config_int(config, "in_channels", 4),
            time_embedding_dim=config_int(config, "time_embedding_dim", 1536),
            groups=config_int(config, "groups", 32),
            attention_head_dim=config_int(config, "attention_head_dim", 64),
            layers_per_block=config_int(config, "layers_per_block", 3),
            block_out_channels=widths,
            cross_attention_dim=config_int(config, "cross_attention_dim", 4096),
            encoder_hid_dim=config_int(config, "encoder_hid_dim", 4096),
        )
        normed, attended = c.widths()
        if any(w % c.groups for w in normed):
            raise ConfigError(
                f"{name} groups {c.groups} do not split the norms' widths {sorted(normed)}"
            )
        if any(w % c.attention_head_dim for w in {*attended, c.time_embedding_dim}):
            raise ConfigError(
                f"{name} attention_head_dim {c.attention_head_dim} does not divide the "
                f"attention widths {sorted({*attended, c.time_embedding_dim})}"
            )
        return c

    @property
    def init_channels(self) -> int:
        return self.block_out_channels[0] // 2

    def down_levels(self) -> list[tuple[int, int, bool]]:
        """``(in, out, attention)`` of each down level, shallowest first."""
        dims = (self.init_channels, *self.block_out_channels)
        return [(dims[i], dims[i + 1], _ATTENTION[i]) for i in range(len(dims) - 1)]

    def up_levels(self) -> list[tuple[int, int, int, bool]]:
        """``(in, skip, out, attention)`` of each up level, deepest first (no skip there)."""
        levels = self.down_levels()[::-1]
        return [
            (out_dim, out_dim if j else 0, in_dim, _ATTENTION[::-1][j])
            for j, (in_dim, out_dim, _) in enumerate(levels)
        ]

    def widths(self) -> tuple[set[int], set[int]]:
        """The widths group norms normalise, and those that attention blocks attend over."""
        normed, attended = {self.init_channels}, set()
        layers = self.layers_per_block
        for in_dim, out_dim, attention in self.down_levels():
            pairs = sum(down_pairs(in_dim, out_dim, layers), [])
            normed.update(w for a, b in pairs for w in (a, max(a, b) // COMPRESSION))
            attended.update((in_dim, out_dim) if attention else ())
        for in_dim, cat, out_dim, attention in self.up_levels():
            pairs = sum(up_pairs(in_dim, cat, out_dim, layers), [])
            normed.update(w for a, b in pairs for w in (a, max(a, b) // COMPRESSION))
            attended.update((in_dim + cat, in_dim, out_dim) if attention else ())
        return normed | attended, attended


def _attention(c: Kandinsky3Config, attention: bool, width: int, context_dim=None):
    if not attention:  # diffusers' nn.Identity
        return nn.Module()
    t, groups, head = c.time_embedding_dim, c.groups, c.attention_head_dim
    return Kandinsky3AttentionBlock(width, t, context_dim, groups, head)


def _resnets(c: Kandinsky3Config, pairs, resample=None, at=None) -> nn.ModuleList:
    """Resnets of ``(in, out)`` channels; the one at index ``at`` resamples."""
    return nn.ModuleList(
        [
            Kandinsky3ResNetBlock(
                a, b, c.time_embedding_dim, c.groups, resample if i == at else None
            )
            for i, (a, b) in enumerate(pairs)
        ]
    )


class _Level(nn.Module):
    """A level's ``attentions`` (its self-attention, then one per resnet pair; empty modules
    where it does not attend), ``resnets_in`` and ``resnets_out``."""

    attends: bool

    def resnet_pairs(self, op, x, temb, context, mask):
        """Each ``resnets_in``, the cross-attention to the text, ``resnets_out``."""
        for i, (resnet_in, resnet_out) in enumerate(
            zip(self.resnets_in, self.resnets_out, strict=True)
        ):
            x = resnet_in(op, x, temb)
            if self.attends:
                x = self.attentions[i + 1](op, x, temb, context, mask)
            x = resnet_out(op, x, temb)
        return x


class Kandinsky3DownSampleBlock(_Level):
    """Self-attention, the resnet pairs; the last resnet halves the grid (but at the deepest)."""

    def __init__(self, c: Kandinsky3Config, in_dim, out_dim, attention, down_sample) -> None:
        super().__init__()
        ins, outs = down_pairs(in_dim, out_dim, c.layers_per_block)
        self.attends = attention
        cross = [_attention(c, attention, b, c.cross_attention_dim) for _, b in ins]
        self.attentions = nn.ModuleList([_attention(c, attention, in_dim), *cross])
        self.resnets_in = _resnets(c, ins)
        self.resnets_out = _resnets(c, outs, "down" if down_sample else None, len(outs) - 1)

    def forward(self, op, x, temb, context, mask):
        if self.attends:
            x = self.attentions[0](op, x, temb)
        return self.resnet_pairs(op, x, temb, context, mask)


class Kandinsky3UpSampleBlock(_Level):
    """The resnet pairs (the first doubles the grid, but at the deepest), then self-attention."""

    def __init__(self, c: Kandinsky3Config, in_dim, cat, out_dim, attention, up_sample) -> None:
        super().__init__()
        ins, outs = up_pairs(in_dim, cat, out_dim, c.layers_per_block)
        self.attends = attention
        cross = [_attention(c, attention, a, c.cross_attention_dim) for a, _ in ins]
        self.attentions = nn.ModuleList([_attention(c, attention, out_dim), *cross])
        self.resnets_in = _resnets(c, ins, "up" if up_sample else None, 0)
        self.resnets_out = _resnets(c, outs)

    def forward(self, op, x, temb, context, mask):
        x = self.resnet_pairs(op, x, temb, context, mask)
        return self.attentions[0](op, x, temb) if self.attends else x


class Kandinsky3UNet(Model):
    """diffusers' ``Kandinsky3UNet``; see the module docstring."""

    config_class = Kandinsky3Config
    task = "denoising"

    def __init__(self, config: Kandinsky3Config) -> None:
        super().__init__()
        self.config = c = config
        init, t = c.init_channels, c.time_embedding_dim
        self.time_proj = Timesteps(init, flip_sin_to_cos=False, downscale_freq_shift=1)
        self.time_embedding = TimestepEmbedding(init, t)
        self.add_time_condition = Kandinsky3AttentionPooling(
            t, c.cross_attention_dim, c.attention_head_dim
        )
        self.conv_in = Conv2d(c.in_channels, init, 3, padding=1)
        self.encoder_hid_proj = Kandinsky3EncoderProj(c.encoder_hid_dim, c.cross_attention_dim)
        last = len(c.block_out_channels) - 1
        self.down_blocks = nn.ModuleList(
            [
                Kandinsky3DownSampleBlock(c, in_dim, out_dim, attention, level != last)
                for level, (in_dim, out_dim, attention) in enumerate(c.down_levels())
            ]
        )
        self.up_blocks = nn.ModuleList(
            [
                Kandinsky3UpSampleBlock(c, in_dim, cat, out_dim, attention, level != 0)
                for level, (in_dim, cat, out_dim, attention) in enumerate(c.up_levels())
            ]
        )
        self.conv_norm_out = GroupNorm(c.groups, init, EPS)
        self.conv_out = Conv2d(init, c.in_channels, 3, padding=1)

    def forward(self, op, sample, timestep, encoder_hidden_states, encoder_attention_mask):
        temb = self.time_embedding(op, self.time_proj(op, timestep, sample))
        context = self.encoder_hid_proj(op, encoder_hidden_states)
        mask = encoder_attention_mask
        temb = self.add_time_condition(op, temb, context, mask)
        x, skips = self.conv_in(op, sample), []
        for block in self.down_blocks:
            x = block(op, x, temb, context, mask)
            skips.append(x)
        skips.pop()  # the deepest level's output goes straight up
        for level, block in enumerate(self.up_blocks):
            x = op.Concat(x, skips.pop(), axis=1) if level else x
            x = block(op, x, temb, context, mask)
        return self.conv_out(op, silu(op, self.conv_norm_out(op, x)))

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        latent = ["batch", c.in_channels, "latent_height", "latent_width"]
        inputs = {
            "sample": (None, latent),
            "timestep": (None, ["batch"]),
            "encoder_hidden_states": (None, ["batch", "sequence", c.encoder_hid_dim]),
            "encoder_attention_mask": (ir.DataType.INT64, ["batch", "sequence"]),
        }
        return {
            "model": GraphSpec(
                inputs, {"out_sample": latent}, lambda op, **v: {"out_sample": self(op, **v)}
            )
        }


MODEL_TYPES = {"Kandinsky3UNet": Kandinsky3UNet}
