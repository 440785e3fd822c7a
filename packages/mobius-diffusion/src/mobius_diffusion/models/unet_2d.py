"""UNet2DModel: the unconditional UNet of DDPM and of the latent diffusion models (LDM).

``conv_in``; down blocks (``DownBlock2D``, or ``AttnDownBlock2D``: a self-attention
over the pixels after each resnet) that keep every state as a skip; a mid-block
(resnet, attention, resnet); up blocks (``UpBlock2D``/``AttnUpBlock2D``) that
concatenate the skips back, newest first, and upsample 2x; GroupNorm, SiLU,
``conv_out``. The timestep goes through the sinusoidal ``time_proj`` and
``time_embedding`` (SiLU, whatever ``act_fn``) into every resnet; a class-conditional
model (``num_class_embeds``) adds ``class_embedding`` of its label. Unlike the
conditional UNet's, ``attention_head_dim`` here is each head's width.

Graph (:class:`mobius.tasks.DenoisingTask`): ``sample`` [batch, in_channels,
latent_height, latent_width] (pixels, for DDPM), ``timestep`` float32 [batch] (a
one-element timestep is broadcast to the batch), and with ``num_class_embeds``
``class_labels`` int64 [batch] -> ``out_sample``. As diffusers, the sample's sides must
be multiples of the total downscale.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv2d, Embedding, GroupNorm
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._checks import (
    config_choice,
    config_float,
    config_int,
    config_ints,
    per_block,
)
from mobius_diffusion.models._embeddings import TimestepEmbedding, Timesteps
from mobius_diffusion.models._resnet import (
    AttentionBlock,
    DownBlock2D,
    UNetMidBlock2D,
    UpBlock2D,
    activation,
)
from mobius_diffusion.models.autoencoder_kl import _DEPRECATED_ATTENTION
from mobius_diffusion.tasks import GraphSpec

_DOWN = ("DownBlock2D", "AttnDownBlock2D")
_UP = ("UpBlock2D", "AttnUpBlock2D")
#: diffusers options that must keep their default: mobius builds nothing else.
_DEFAULTS = {
    "time_embedding_type": ("positional",),
    "class_embed_type": (None,),
    "downsample_type": ("conv",),
    "upsample_type": ("conv",),
    "mid_block_type": ("UNetMidBlock2D", None),
    "resnet_time_scale_shift": ("default", "scale_shift"),
}
#: Attention parameters of checkpoints saved before diffusers 0.14 (``query``, ``proj_attn``).
_DEPRECATED_KEY = re.compile(r"(attentions\.\d+)\.(query|key|value|proj_attn)\.")


@dataclass
class UNet2DConfig:
    in_channels: int = 3
    out_channels: int = 3
    down_block_types: tuple[str, ...] = ()
    up_block_types: tuple[str, ...] = ()
    mid_block_type: str | None = "UNetMidBlock2D"
    block_out_channels: tuple[int, ...] = ()
    layers_per_block: int = 2
    #: Each head's width, per block (diffusers: the block's width when None).
    head_dims: tuple[int, ...] = ()
    mid_block_scale_factor: float = 1.0
    downsample_padding: int = 1
    act_fn: str = "silu"
    norm_num_groups: int = 32
    norm_eps: float = 1e-5
    resnet_time_scale_shift: str = "default"
    add_attention: bool = True
    flip_sin_to_cos: bool = True
    freq_shift: float = 0
    time_embedding_dim: int | None = None
    center_input_sample: bool = False
    num_class_embeds: int | None = None

    @classmethod
    def from_hf(cls, config: Any) -> UNet2DConfig:
        name = config.model_type
        for key, built in _DEFAULTS.items():
            config_choice(config, key, built[0], built)
        widths = config_ints(config, "block_out_channels", (224, 448, 672, 896))
        n = len(widths)
        down = per_block(config, "down_block_types", None, n, _DOWN)
        up = per_block(config, "up_block_types", None, n, _UP)
        groups = config_int(config, "norm_num_groups", 32)
        shift = getattr(config, "resnet_time_scale_shift", "default")
        # diffusers' mid-block attention norm: attn_norm_num_groups, else the resnets' groups
        # with the default time embedding and no norm at all with scale_shift
        attn_groups = getattr(config, "attn_norm_num_groups", None)
        if attn_groups is None and shift == "default":
            attn_groups = groups
        mid_attention = getattr(config, "mid_block_type", "UNetMidBlock2D") is not None and bool(
            getattr(config, "add_attention", True)
        )
        if attn_groups != groups and mid_attention:
            raise ConfigError(
                f"{name} mid-block attention norm groups {attn_groups!r} (attn_norm_num_groups "
                f"with resnet_time_scale_shift {shift!r}) other than norm_num_groups {groups} "
                "are not built by mobius"
            )
        head_dim = getattr(config, "attention_head_dim", 8)
        head_dims = (
            tuple(widths) if head_dim is None else (config_int(config, "attention_head_dim"),) * n
        )
        for width in widths:  # heads are width // head dim, as diffusers floors them
            if width % groups:
                raise ConfigError(f"{name} block width {width} does not split into {groups} groups")
        classes = getattr(config, "num_class_embeds", None)
        time_dim = getattr(config, "time_embedding_dim", None)
        act_fn = getattr(config, "act_fn", "silu")
        activation(act_fn)
        return cls(
            in_channels=config_int(config, "in_channels", 3),
            out_channels=config_int(config, "out_channels", 3),
            down_block_types=down,
            up_block_types=up,
            mid_block_type=getattr(config, "mid_block_type", "UNetMidBlock2D"),
            block_out_channels=widths,
            layers_per_block=config_int(config, "layers_per_block", 2),
            head_dims=head_dims,
            mid_block_scale_factor=config_float(config, "mid_block_scale_factor", 1.0),
            downsample_padding=config_int(config, "downsample_padding", 1, low=0),
            act_fn=act_fn,
            norm_num_groups=groups,
            norm_eps=config_float(config, "norm_eps", 1e-5),
            resnet_time_scale_shift=shift,
            add_attention=bool(getattr(config, "add_attention", True)),
            flip_sin_to_cos=bool(getattr(config, "flip_sin_to_cos", True)),
            freq_shift=float(getattr(config, "freq_shift", 0)),
            time_embedding_dim=None
            if time_dim is None
            else config_int(config, "time_embedding_dim"),
            center_input_sample=bool(getattr(config, "center_input_sample", False)),
            num_class_embeds=None if classes is None else config_int(config, "num_class_embeds"),
        )

    @property
    def time_embed_dim(self) -> int:
        return self.time_embedding_dim or self.block_out_channels[0] * 4

    def resnet_args(self) -> tuple:
        """What every resnet takes after its widths: time embedding, groups, eps, activation."""
        return self.time_embed_dim, self.norm_num_groups, self.norm_eps, self.act_fn


class AttnDownBlock2D(DownBlock2D):
    """``DownBlock2D`` with a self-attention over the pixels after each resnet."""

    def __init__(self, head_dim: int, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        width, groups, eps = args[1], args[4], args[5]
        self.attentions = nn.ModuleList(
            [AttentionBlock(width, head_dim, groups, eps) for _ in self.resnets]
        )

    def layer(self, op, i, x, temb, context):
        return self.attentions[i](op, super().layer(op, i, x, temb, context))


class AttnUpBlock2D(UpBlock2D):
    """``UpBlock2D`` with a self-attention over the pixels after each resnet."""

    def __init__(self, head_dim: int, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        width, groups, eps = args[1], args[3], args[4]
        self.attentions = nn.ModuleList(
            [AttentionBlock(width, head_dim, groups, eps) for _ in self.resnets]
        )

    def layer(self, op, i, x, temb, context):
        return self.attentions[i](op, super().layer(op, i, x, temb, context))


class UNet2DModel(Model):
    """diffusers' ``UNet2DModel`` (DDPM, LDM layouts; class-conditional with ``num_class_embeds``)."""

    config_class = UNet2DConfig
    task = "denoising"

    def __init__(self, config: UNet2DConfig) -> None:
        super().__init__()
        self.config = c = config
        widths = c.block_out_channels
        self.conv_in = Conv2d(c.in_channels, widths[0], 3, padding=1)
        self.time_proj = Timesteps(widths[0], c.flip_sin_to_cos, c.freq_shift)
        self.time_embedding = TimestepEmbedding(widths[0], c.time_embed_dim)
        self.class_embedding = (
            Embedding(c.num_class_embeds, c.time_embed_dim) if c.num_class_embeds else None
        )
        self.down_blocks = nn.ModuleList([self.make_down_block(i) for i in range(len(widths))])
        self.mid_block = None
        if c.mid_block_type is not None:
            self.mid_block = UNetMidBlock2D(
                widths[-1],
                *c.resnet_args(),
                add_attention=c.add_attention,
                attention_head_dim=c.head_dims[-1],
                output_scale_factor=c.mid_block_scale_factor,
                time_embedding_norm=c.resnet_time_scale_shift,
            )
        self.up_blocks = nn.ModuleList([self.make_up_block(i) for i in range(len(widths))])
        self.conv_norm_out = GroupNorm(c.norm_num_groups, widths[0], c.norm_eps)
        self.conv_act = activation("silu")  # diffusers' nn.SiLU, whatever act_fn
        self.conv_out = Conv2d(widths[0], c.out_channels, 3, padding=1)

    def make_down_block(self, i: int) -> DownBlock2D:
        c, widths = self.config, self.config.block_out_channels
        args = (widths[max(i - 1, 0)], widths[i], c.layers_per_block, *c.resnet_args())
        args += (i < len(widths) - 1, c.downsample_padding, c.resnet_time_scale_shift)
        if c.down_block_types[i] == "AttnDownBlock2D":
            return AttnDownBlock2D(c.head_dims[i], *args)
        return DownBlock2D(*args)

    def make_up_block(self, i: int) -> UpBlock2D:
        c = self.config
        widths = list(reversed(c.block_out_channels))
        layers = c.layers_per_block + 1
        prev, out = widths[max(i - 1, 0)], widths[i]
        skip_last = widths[min(i + 1, len(widths) - 1)]
        in_channels = [
            (prev if j == 0 else out) + (skip_last if j == layers - 1 else out)
            for j in range(layers)
        ]  # the input (the block below's, then this one's) beside each popped skip
        args = (in_channels, out, *c.resnet_args(), i < len(widths) - 1, c.resnet_time_scale_shift)
        if c.up_block_types[i] == "AttnUpBlock2D":
            return AttnUpBlock2D(list(reversed(c.head_dims))[i], *args)
        return UpBlock2D(*args)

    def forward(self, op, sample, timestep, class_labels=None):
        c = self.config
        if c.center_input_sample:
            sample = op.Sub(op.Mul(sample, op.CastLike(2.0, sample)), op.CastLike(1.0, sample))
        batch = op.Shape(sample, start=0, end=1)
        t = op.Expand(op.Reshape(timestep, op.Constant(value_ints=[-1])), batch)
        emb = self.time_embedding(op, self.time_proj(op, t, sample))  # [b, time_embed_dim]
        if self.class_embedding is not None:
            emb = op.Add(emb, op.CastLike(self.class_embedding(op, class_labels), emb))
        x = self.conv_in(op, sample)
        skips = [x]
        for block in self.down_blocks:
            x, states = block(op, x, emb)
            skips += states
        if self.mid_block is not None:
            x = self.mid_block(op, x, emb)
        for block in self.up_blocks:  # each pops one skip per resnet; plain 2x upsampling
            n = len(block.resnets)
            skips, mine = skips[:-n], skips[-n:]
            x = block(op, x, emb, None, mine)
        return self.conv_out(op, self.conv_act(op, self.conv_norm_out(op, x)))

    def sanitize(self, weights: dict) -> dict:
        """Rename the attention of old checkpoints (``query``, ``proj_attn``), as diffusers does."""
        return {
            _DEPRECATED_KEY.sub(lambda m: f"{m[1]}.{_DEPRECATED_ATTENTION[m[2]]}.", k): v
            for k, v in weights.items()
        }

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        grid = ["latent_height", "latent_width"]
        inputs = {
            "sample": (None, ["batch", c.in_channels, *grid]),
            "timestep": (ir.DataType.FLOAT, ["batch"]),
        }
        if c.num_class_embeds:
            inputs["class_labels"] = (ir.DataType.INT64, ["batch"])
        return {
            "model": GraphSpec(
                inputs,
                {"out_sample": ["batch", c.out_channels, *grid]},
                lambda op, **feeds: {"out_sample": self(op, **feeds)},
            )
        }


MODEL_TYPES = {"UNet2DModel": UNet2DModel}
