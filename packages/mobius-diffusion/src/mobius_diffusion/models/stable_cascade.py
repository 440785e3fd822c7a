"""Stable Cascade's UNet (``StableCascadeUNet``): the prior (stage C) and the decoder (stage B).

The latent is pixel-unshuffled by ``patch_size``, embedded by a 1x1 conv and a
channel LayerNorm, then run through levels of ConvNeXt-like blocks down and up
(:mod:`~mobius_diffusion.models._stable_cascade_blocks`): each level repeats its block
list once per repeat mapper (a 1x1 conv between the passes), and the first block of
each up level but the deepest takes the down path's output at that level as a skip
(the input resized to it first, bilinear, when the sizes differ). Between levels a
channel LayerNorm and a stride-2 conv (down) or transposed conv (up), or with
``switch_level`` a 1x1 conv and an optional bilinear 2x resize.

Conditioning: the timestep ratio's sinusoid (``timestep_ratio_embedding_dim``) and
one per ``timestep_conditioning_type`` entry modulate every timestep block; the CLIP
tokens (the pooled text mapped to ``clip_seq`` tokens; the prior also maps the text
states and the image embeddings) are the attention blocks' context. The decoder adds
the prior's image embeddings (``effnet``, resized to the latent grid) and its pixel
mapper's output.

As the pipelines call it, the extra conditionings (``sca``, ``crp``) are zero and so
are the decoder's ``pixels`` (3 x 8 x 8 zeros, a constant once mapped): the graph
computes them so and takes neither as an input. Graph
(:class:`mobius_diffusion.tasks.DenoisingTask`): ``sample`` [batch, in_channels,
latent_height, latent_width], ``timestep_ratio`` [batch] (in [0, 1]),
``clip_text_pooled`` [batch, 1, pooled width]; the prior adds ``clip_text`` [batch,
sequence, width] and ``clip_img`` [batch, image_tokens, width], the decoder
``effnet`` [batch, channels, effnet_height, effnet_width] -> ``out_sample``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv2d, Linear
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._checks import config_int, config_ints
from mobius_diffusion.models._dit_blocks import WeightlessLayerNorm
from mobius_diffusion.models._stable_cascade_blocks import (
    EPS,
    ChannelLayerNorm,
    ConvTranspose2d,
    SDCascadeAttnBlock,
    SDCascadeResBlock,
    SDCascadeTimestepBlock,
    UpDownBlock2d,
    ratio_embedding,
    resize_bilinear,
)
from mobius_diffusion.models.autoencoder_dc import pixel_shuffle, pixel_unshuffle
from mobius_diffusion.tasks import GraphSpec

RES, TIMESTEP, ATTN = "SDCascadeResBlock", "SDCascadeTimestepBlock", "SDCascadeAttnBlock"
#: The 3 x 8 x 8 zeros diffusers maps when no ``pixels`` are given (the pipelines give none).
PIXEL_CHANNELS = 3


def _optional_int(config: Any, name: str) -> int | None:
    return None if getattr(config, name, None) is None else config_int(config, name)


def _bools(config: Any, name: str, default: Any, count: int) -> tuple[bool, ...]:
    """``config.name``: one bool for every level, or a list of ``count``."""
    values = getattr(config, name, default)
    values = [values] * count if isinstance(values, bool) else values
    if not isinstance(values, list | tuple) or len(values) != count:
        raise ConfigError(f"{config.model_type} {name} must give {count} booleans, got {values!r}")
    if not all(isinstance(v, bool) for v in values):
        raise ConfigError(f"{config.model_type} {name} must hold booleans, got {values!r}")
    return tuple(values)


@dataclass
class StableCascadeUNetConfig:
    in_channels: int = 16
    out_channels: int = 16
    timestep_ratio_embedding_dim: int = 64
    patch_size: int = 1
    conditioning_dim: int = 2048
    block_out_channels: tuple[int, ...] = (2048, 2048)
    num_attention_heads: tuple[int, ...] = (32, 32)
    down_num_layers_per_block: tuple[int, ...] = (8, 24)
    up_num_layers_per_block: tuple[int, ...] = (24, 8)
    down_blocks_repeat_mappers: tuple[int, ...] = (1, 1)
    up_blocks_repeat_mappers: tuple[int, ...] = (1, 1)
    block_types_per_layer: tuple[tuple[str, ...], ...] = ((RES, TIMESTEP, ATTN),) * 2
    clip_text_in_channels: int | None = None
    clip_text_pooled_in_channels: int = 1280
    clip_image_in_channels: int | None = None
    clip_seq: int = 4
    effnet_in_channels: int | None = None
    pixel_mapper_in_channels: int | None = None
    kernel_size: int = 3
    self_attn: tuple[bool, ...] = (True, True)
    timestep_conditioning_type: tuple[str, ...] = ("sca", "crp")
    switch_level: tuple[bool, ...] | None = None

    @classmethod
    def from_hf(cls, config: Any) -> StableCascadeUNetConfig:
        name = config.model_type
        widths = config_ints(config, "block_out_channels", (2048, 2048))
        n = len(widths)
        lists = {
            key: config_ints(config, key, default, count=n, low=low)
            for key, default, low in (
                ("down_num_layers_per_block", (8, 24), 0),
                ("up_num_layers_per_block", (24, 8), 0),
                ("down_blocks_repeat_mappers", (1, 1), 1),
                ("up_blocks_repeat_mappers", (1, 1), 1),
            )
        }
        types = getattr(config, "block_types_per_layer", cls.block_types_per_layer)
        if not isinstance(types, list | tuple) or len(types) != n:
            raise ConfigError(f"{name} block_types_per_layer must give {n} lists, got {types!r}")
        for level in types:
            if not isinstance(level, list | tuple) or set(level) - {RES, TIMESTEP, ATTN}:
                raise ConfigError(
                    f"{name} block_types_per_layer holds {level!r}: mobius builds "
                    f"{RES}, {TIMESTEP} and {ATTN}"
                )
        heads = getattr(config, "num_attention_heads", (32, 32))
        if not isinstance(heads, list | tuple) or len(heads) != n:
            raise ConfigError(f"{name} num_attention_heads must give {n} values, got {heads!r}")
        for width, count, level in zip(widths, heads, types, strict=True):
            if ATTN in level and not (isinstance(count, int) and count > 0 and width % count == 0):
                raise ConfigError(
                    f"{name} num_attention_heads {count!r} must divide its level's width {width}"
                )
        conds = getattr(config, "timestep_conditioning_type", ("sca", "crp"))
        if not isinstance(conds, list | tuple) or not all(
            isinstance(c, str) and c.isidentifier() for c in conds
        ):
            raise ConfigError(f"{name} timestep_conditioning_type must list names, got {conds!r}")
        switch = getattr(config, "switch_level", None)
        if switch is not None:
            switch = _bools(config, "switch_level", None, n - 1)
        kernel = config_int(config, "kernel_size", 3)
        if kernel % 2 == 0:
            raise ConfigError(f"{name} kernel_size {kernel}: mobius builds odd kernels (same size)")
        text, image = (
            _optional_int(config, k) for k in ("clip_text_in_channels", "clip_image_in_channels")
        )
        if (text is None) != (image is None):
            raise ConfigError(
                f"{name} sets one of clip_text_in_channels and clip_image_in_channels: diffusers "
                "maps the text states only with the image embeddings, so both or neither"
            )
        pixels = _optional_int(config, "pixel_mapper_in_channels")
        if pixels not in (None, PIXEL_CHANNELS):
            raise ConfigError(
                f"{name} pixel_mapper_in_channels {pixels}: diffusers maps {PIXEL_CHANNELS}-channel "
                "zeros when no pixels are given, so only 3 runs"
            )
        return cls(
            in_channels=config_int(config, "in_channels", 16),
            out_channels=config_int(config, "out_channels", 16),
            timestep_ratio_embedding_dim=config_int(config, "timestep_ratio_embedding_dim", 64),
            patch_size=config_int(config, "patch_size", 1),
            conditioning_dim=config_int(config, "conditioning_dim", 2048),
            block_out_channels=widths,
            num_attention_heads=tuple(heads),
            block_types_per_layer=tuple(tuple(level) for level in types),
            clip_text_in_channels=text,
            clip_text_pooled_in_channels=config_int(config, "clip_text_pooled_in_channels", 1280),
            clip_image_in_channels=image,
            clip_seq=config_int(config, "clip_seq", 4),
            effnet_in_channels=_optional_int(config, "effnet_in_channels"),
            pixel_mapper_in_channels=pixels,
            kernel_size=kernel,
            self_attn=_bools(config, "self_attn", True, n),
            timestep_conditioning_type=tuple(conds),
            switch_level=switch,
            **lists,
        )


def _conditioning_mapper(in_channels: int, width: int) -> nn.ModuleList:
    """``effnet_mapper`` / ``pixels_mapper``: conv (``.0``), GELU, conv (``.2``), channel norm."""
    return nn.ModuleList(
        [
            Conv2d(in_channels, width * 4, 1),
            nn.Module(),
            Conv2d(width * 4, width, 1),
            ChannelLayerNorm(width, EPS),
        ]
    )


def _map(op, mapper: nn.ModuleList, x):
    return mapper[3](op, mapper[2](op, op.Gelu(mapper[0](op, x))))


class StableCascadeUNet(Model):
    """diffusers' ``StableCascadeUNet`` (Stable Cascade's stages C and B)."""

    config_class = StableCascadeUNetConfig
    task = "denoising"

    def __init__(self, config: StableCascadeUNetConfig) -> None:
        super().__init__()
        self.config = c = config
        widths, n, cond = c.block_out_channels, len(c.block_out_channels), c.conditioning_dim
        self.effnet_mapper = self.pixels_mapper = None
        if c.effnet_in_channels:
            self.effnet_mapper = _conditioning_mapper(c.effnet_in_channels, widths[0])
        if c.pixel_mapper_in_channels:
            self.pixels_mapper = _conditioning_mapper(c.pixel_mapper_in_channels, widths[0])
        self.clip_txt_pooled_mapper = Linear(
            c.clip_text_pooled_in_channels, cond * c.clip_seq, bias=True
        )
        self.clip_txt_mapper = self.clip_img_mapper = None
        if c.clip_text_in_channels:
            self.clip_txt_mapper = Linear(c.clip_text_in_channels, cond, bias=True)
            self.clip_img_mapper = Linear(c.clip_image_in_channels, cond * c.clip_seq, bias=True)
        self.clip_norm = WeightlessLayerNorm(cond, EPS)
        self.embedding = nn.ModuleList(
            [
                nn.Module(),  # PixelUnshuffle
                Conv2d(c.in_channels * c.patch_size**2, widths[0], 1),
                ChannelLayerNorm(widths[0], EPS),
            ]
        )
        self.down_downscalers = nn.ModuleList(
            [nn.Module()]
            + [self._resampler(i, widths[i - 1], widths[i], up=False) for i in range(1, n)]
        )
        self.down_blocks = nn.ModuleList([self._level(i, up=False) for i in range(n)])
        self.down_repeat_mappers = nn.ModuleList(
            [self._mappers(widths[i], c.down_blocks_repeat_mappers[i]) for i in range(n)]
        )
        levels = list(reversed(range(n)))
        self.up_upscalers = nn.ModuleList(
            [
                self._resampler(i, widths[i], widths[i - 1], up=True) if i else nn.Module()
                for i in levels
            ]
        )
        self.up_blocks = nn.ModuleList([self._level(i, up=True) for i in levels])
        self.up_repeat_mappers = nn.ModuleList(
            [self._mappers(widths[i], c.up_blocks_repeat_mappers[::-1][i]) for i in levels]
        )
        self.clf = nn.ModuleList(
            [
                ChannelLayerNorm(widths[0], EPS),
                Conv2d(widths[0], c.out_channels * c.patch_size**2, 1),
            ]
        )
        half = c.timestep_ratio_embedding_dim // 2
        # float32 frequencies as torch computes them (arange * -step, exp), each rounded once
        steps = np.arange(half, dtype=np.float32) * np.float32(-math.log(10000) / (half - 1))
        self._freqs = np.exp(steps.astype(np.float64)).astype(np.float32)

    def _resampler(self, i: int, c_in: int, c_out: int, up: bool) -> nn.ModuleList:
        """Between level ``i - 1`` and ``i``: channel norm (``.0``), then the resampling (``.1``)."""
        c = self.config
        if c.switch_level is not None:
            sampler = UpDownBlock2d(c_in, c_out, "up" if up else "down", c.switch_level[i - 1])
        elif up:
            sampler = ConvTranspose2d(c_in, c_out, 2, stride=2)
        else:
            sampler = Conv2d(c_in, c_out, 2, stride=2)
        return nn.ModuleList([ChannelLayerNorm(c_in, EPS), sampler])

    def _level(self, i: int, up: bool) -> nn.ModuleList:
        """Level ``i``'s blocks: its block types, once per layer; up levels but the deepest
        widen the first block's input for the skip."""
        c, width = self.config, self.config.block_out_channels[i]
        layers = c.up_num_layers_per_block[::-1][i] if up else c.down_num_layers_per_block[i]
        blocks = []
        for j in range(layers):
            for k, kind in enumerate(c.block_types_per_layer[i]):
                skip = width if up and i < len(c.block_out_channels) - 1 and j == k == 0 else 0
                if kind == RES:
                    blocks.append(SDCascadeResBlock(width, skip, c.kernel_size))
                elif kind == TIMESTEP:
                    blocks.append(
                        SDCascadeTimestepBlock(
                            width, c.timestep_ratio_embedding_dim, c.timestep_conditioning_type
                        )
                    )
                else:
                    heads, self_attn = c.num_attention_heads[i], c.self_attn[i]
                    blocks.append(SDCascadeAttnBlock(width, c.conditioning_dim, heads, self_attn))
        return nn.ModuleList(blocks)

    @staticmethod
    def _mappers(width: int, repeats: int) -> nn.ModuleList:
        return nn.ModuleList([Conv2d(width, width, 1) for _ in range(repeats - 1)])

    def forward(
        self,
        op,
        sample,
        timestep_ratio,
        clip_text_pooled,
        clip_text=None,
        clip_img=None,
        effnet=None,
    ):
        c = self.config
        dim = c.timestep_ratio_embedding_dim
        freqs = op.Constant(value=ir.tensor(self._freqs))
        zero = op.ConstantOfShape(
            op.Shape(timestep_ratio), value=ir.tensor([0.0], dtype=ir.DataType.FLOAT)
        )
        embeddings = [ratio_embedding(op, timestep_ratio, dim, freqs)]
        embeddings += [ratio_embedding(op, zero, dim, freqs)] * len(c.timestep_conditioning_type)
        embeddings = [op.CastLike(e, sample) for e in embeddings]  # each [b, dim]
        clip = self.clip_tokens(op, clip_text_pooled, clip_text, clip_img)

        x = sample if c.patch_size == 1 else pixel_unshuffle(op, sample, c.patch_size)
        x = self.embedding[2](op, self.embedding[1](op, x))
        grid = op.Shape(x, start=2, end=4)
        if self.effnet_mapper is not None:
            x = op.Add(x, _map(op, self.effnet_mapper, resize_bilinear(op, effnet, grid)))
        if self.pixels_mapper is not None:  # zeros: one value per channel, whatever the size
            pixels = op.CastLike(
                op.Constant(value=ir.tensor(np.zeros((1, PIXEL_CHANNELS, 1, 1), np.float32))), x
            )
            x = op.Add(x, _map(op, self.pixels_mapper, pixels))

        levels = []  # the down path's output at each level, deepest first
        for i, (blocks, mappers) in enumerate(
            zip(self.down_blocks, self.down_repeat_mappers, strict=True)
        ):
            if i > 0:
                scaler = self.down_downscalers[i]
                x = scaler[1](op, scaler[0](op, x))
            x = self.run_level(op, x, blocks, mappers, embeddings, clip, None)
            levels.insert(0, x)
        x = levels[0]
        for i, (blocks, mappers) in enumerate(
            zip(self.up_blocks, self.up_repeat_mappers, strict=True)
        ):
            x = self.run_level(op, x, blocks, mappers, embeddings, clip, levels[i] if i else None)
            if i < len(levels) - 1:
                scaler = self.up_upscalers[i]
                x = scaler[1](op, scaler[0](op, x))
        x = self.clf[1](op, self.clf[0](op, x))
        return x if c.patch_size == 1 else pixel_shuffle(op, x, c.patch_size)

    def clip_tokens(self, op, pooled, text, image):
        """The attention context ``[b, tokens, conditioning_dim]``: the mapped text states, the
        pooled text's ``clip_seq`` tokens and the image embeddings' (the prior), normed."""
        split = op.Constant(value_ints=[0, -1, self.config.conditioning_dim])
        clip = op.Reshape(self.clip_txt_pooled_mapper(op, pooled), split)
        if self.clip_txt_mapper is not None:
            image = op.Reshape(self.clip_img_mapper(op, image), split)
            clip = op.Concat(self.clip_txt_mapper(op, text), clip, image, axis=1)
        return self.clip_norm(op, clip)

    @staticmethod
    def run_level(op, x, blocks, mappers, embeddings, clip, skip):
        """A level's blocks once per repeat mapper, the mapper between passes; ``skip`` goes
        (each pass) to a first residual block, ``x`` resized to it first."""
        for rep in range(len(mappers) + 1):
            for k, block in enumerate(blocks):
                if isinstance(block, SDCascadeResBlock):
                    if k == 0 and skip is not None:
                        x = block(op, resize_bilinear(op, x, op.Shape(skip, start=2, end=4)), skip)
                    else:
                        x = block(op, x)
                elif isinstance(block, SDCascadeAttnBlock):
                    x = block(op, x, clip)
                else:
                    x = block(op, x, embeddings)
            if rep < len(mappers):
                x = mappers[rep](op, x)
        return x

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        latent = ["batch", c.in_channels, "latent_height", "latent_width"]
        inputs = {
            "sample": (None, latent),
            "timestep_ratio": (None, ["batch"]),
            "clip_text_pooled": (None, ["batch", 1, c.clip_text_pooled_in_channels]),
        }
        if self.clip_txt_mapper is not None:
            inputs["clip_text"] = (None, ["batch", "sequence", c.clip_text_in_channels])
            inputs["clip_img"] = (None, ["batch", "image_tokens", c.clip_image_in_channels])
        if self.effnet_mapper is not None:
            inputs["effnet"] = (
                None,
                ["batch", c.effnet_in_channels, "effnet_height", "effnet_width"],
            )
        outputs = {"out_sample": ["batch", c.out_channels, "latent_height", "latent_width"]}

        def forward(op, **values):
            return {"out_sample": self(op, **values)}

        return {"model": GraphSpec(inputs, outputs, forward)}


MODEL_TYPES = {"StableCascadeUNet": StableCascadeUNet}
