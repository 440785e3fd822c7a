"""UNet2DConditionModel: the denoiser of Stable Diffusion 1.x/2.x and SDXL.

``conv_in``; down blocks (``CrossAttnDownBlock2D``/``DownBlock2D``) that keep every
state as a skip; a mid-block (``UNetMidBlock2DCrossAttn``); up blocks that
concatenate the skips back, newest first; GroupNorm, SiLU, ``conv_out``. The
timestep goes through the sinusoidal ``time_proj`` and ``time_embedding`` into
every resnet; SDXL (``addition_embed_type="text_time"``) adds ``add_embedding`` of
the pooled text embedding concatenated with the sinusoidal embeddings of the six
``time_ids`` (original size, crop origin, target size). Note diffusers' naming:
``attention_head_dim`` is the number of heads of each block's transformers.

Kandinsky 2.2 (``encoder_hid_dim_type="image_proj"``, ``addition_embed_type="image"``) takes
``image_embeds`` [batch, encoder_hid_dim] in place of ``encoder_hidden_states``: projected
to 32 context tokens and added to the time embedding (:mod:`._image_conditioning`); its
blocks are the simple ones of :mod:`._simple_cross_attn` (``attention_head_dim`` there is
each head's width).

Graph (:class:`mobius.tasks.DenoisingTask`): ``sample`` [batch, in_channels,
latent_height, latent_width], ``timestep`` float32 [batch] (float32 whatever the
build dtype, as a scheduler's timesteps are float or integer: cast integers to
float; a one-element timestep is broadcast to the batch), ``encoder_hidden_states``
[batch, sequence, cross_attention_dim]; SDXL adds ``text_embeds`` [batch,
text_embeds_dim] and ``time_ids`` [batch, 6]; a latent consistency model
(``time_cond_proj_dim``) adds ``timestep_cond`` [batch, time_cond_proj_dim], the
guidance-scale embedding the LCM pipelines compute (``get_guidance_scale_embedding``
of ``guidance_scale - 1``) -> ``out_sample``. Latent sizes that are not a multiple of
the total downscale upsample to the skips' sizes, as diffusers.

Residual inputs, only when the build asks (``residuals``, from the build option
``--unet-residuals``, which a whole pipeline with a ``controlnet`` or ``adapter``
component sets for its ``unet``): ``controlnet`` adds
``down_block_additional_residuals.{i}`` (one per skip, added to it) and
``mid_block_additional_residual`` (added to the mid-block's output), a ControlNet's
outputs; ``adapter`` adds ``down_intrablock_additional_residuals.{i}``, a
T2I-Adapter's features: one per down block (added to the block's last state, as
diffusers: before the downsampler in a cross-attention block, after it in a plain
one), then one added to the mid-block's output (the SDXL adapter's last feature). A
residual without its feature is fed as zeros ``[batch, channels, 1, 1]``: each
residual's spatial size is free, so it broadcasts, and adding zero is exact.

IP-Adapter attention, only when the build asks (``ip_adapter``, the adapter file of
the build option ``--ip-adapter``): every cross-attention also attends to
``ip_adapter_image_embeds`` [batch, image_tokens, cross_attention_dim] (the adapter's
image projection, a graph of its own), times ``ip_adapter_scale`` (a scalar), as
diffusers' ``IPAdapterAttnProcessor2_0`` (:mod:`._ip_adapter_attention`); the
``to_k_ip``/``to_v_ip`` weights come from the adapter file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv2d, GroupNorm
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._embeddings import TimestepEmbedding, Timesteps
from mobius_diffusion.models._image_conditioning import (
    ImageProjection,
    ImageTimeEmbedding,
    check_image_conditioning,
)
from mobius_diffusion.models._ip_adapter_attention import IPContext, ip_adapter_weights
from mobius_diffusion.models._resnet import DownBlock2D, UNetMidBlock2D, UpBlock2D, activation
from mobius_diffusion.models._simple_cross_attn import (
    ResnetDownsampleBlock2D,
    ResnetUpsampleBlock2D,
    SimpleCrossAttention,
    SimpleCrossAttnDownBlock2D,
    SimpleCrossAttnUpBlock2D,
    UNetMidBlock2DSimpleCrossAttn,
)
from mobius_diffusion.models._unet_blocks import (
    CrossAttention,
    CrossAttnDownBlock2D,
    CrossAttnUpBlock2D,
    UNetMidBlock2DCrossAttn,
)
from mobius_diffusion.tasks import GraphSpec

_DOWN = (
    "CrossAttnDownBlock2D",
    "DownBlock2D",
    "SimpleCrossAttnDownBlock2D",
    "ResnetDownsampleBlock2D",
)
_UP = ("CrossAttnUpBlock2D", "UpBlock2D", "SimpleCrossAttnUpBlock2D", "ResnetUpsampleBlock2D")
_MID = ("UNetMidBlock2DCrossAttn", "UNetMidBlock2DSimpleCrossAttn", None)

#: diffusers options that must keep their default: mobius builds nothing else.
_DEFAULTS = {
    "class_embed_type": None,
    "num_class_embeds": None,
    "time_embedding_type": "positional",
    "timestep_post_act": None,
    "attention_type": "default",
    "dual_cross_attention": False,
    "only_cross_attention": False,
    "num_attention_heads": None,
    "class_embeddings_concat": False,
    "resnet_skip_time_act": False,
    "resnet_out_scale_factor": 1.0,
    "mid_block_only_cross_attention": None,
}
# Left as read: ``upcast_attention`` (diffusers' default SDPA processor ignores it too).


def _per_block(value, n: int, name: str) -> list:
    """An int for every block, or a list with one entry per block."""
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ConfigError(f"{name} {value} has {len(value)} entries for {n} blocks")
        return list(value)
    return [value] * n


def _per_layer(value, n: int) -> list[int]:
    """A block's transformer depth: one int for its ``n`` layers, or one per layer."""
    return list(value) if isinstance(value, (list, tuple)) else [value] * n


@dataclass
class UNet2DConditionConfig:
    in_channels: int = 4
    out_channels: int = 4
    down_block_types: tuple[str, ...] = ()
    up_block_types: tuple[str, ...] = ()
    mid_block_type: str | None = "UNetMidBlock2DCrossAttn"
    block_out_channels: tuple[int, ...] = ()
    layers_per_block: list[int] = field(default_factory=list)
    heads: list[int] = field(default_factory=list)
    cross_attention_dim: list[int] = field(default_factory=list)
    transformer_layers: list = field(default_factory=list)
    reverse_transformer_layers: list | None = None
    downsample_padding: int = 1
    mid_block_scale_factor: float = 1.0
    act_fn: str = "silu"
    norm_num_groups: int = 32
    norm_eps: float = 1e-5
    use_linear_projection: bool = False
    flip_sin_to_cos: bool = True
    freq_shift: float = 0
    resnet_time_scale_shift: str = "default"
    time_embedding_dim: int | None = None
    time_embedding_act_fn: str | None = None
    center_input_sample: bool = False
    conv_in_kernel: int = 3
    conv_out_kernel: int = 3
    addition_embed_type: str | None = None
    addition_time_embed_dim: int | None = None
    projection_class_embeddings_input_dim: int | None = None
    time_cond_proj_dim: int | None = None
    #: Kandinsky 2.2: ``"image_proj"`` (the image embedding as the cross-attention's tokens).
    encoder_hid_dim_type: str | None = None
    encoder_hid_dim: int | None = None
    #: The simple blocks' GroupNorm of the text (``"group_norm"``), or None.
    cross_attention_norm: str | None = None
    #: Which residual inputs the graph takes: None, "controlnet" or "adapter" (a build option).
    residuals: str | None = None
    #: The IP-Adapter file whose attention every cross-attention gets, or None (a build option).
    ip_adapter: str | None = None

    @classmethod
    def from_hf(cls, config: Any) -> UNet2DConditionConfig:
        c = cls._read(config)
        down, up = list(config.down_block_types), list(config.up_block_types)
        if any(t not in _DOWN for t in down) or any(t not in _UP for t in up):
            raise ConfigError(f"UNet blocks {down} / {up}: mobius builds {_DOWN} and {_UP}")
        if len(up) != len(down) or len(c.block_out_channels) != len(down):
            raise ConfigError(
                "UNet down_block_types, up_block_types and block_out_channels differ in length"
            )
        if c.mid_block_type not in _MID:
            raise ConfigError(f"UNet mid_block_type {c.mid_block_type!r} is not built by mobius")
        if c.addition_embed_type not in (None, "text_time", "image"):
            raise ConfigError(
                f"UNet addition_embed_type {c.addition_embed_type!r} is not built by mobius"
            )
        check_image_conditioning(config, c)
        if c.time_cond_proj_dim is not None and (
            isinstance(c.time_cond_proj_dim, bool)
            or not isinstance(c.time_cond_proj_dim, int)
            or c.time_cond_proj_dim < 1
        ):
            raise ConfigError(
                f"UNet time_cond_proj_dim must be a positive integer, got {c.time_cond_proj_dim!r}"
            )
        if c.norm_num_groups is None:
            raise ConfigError("UNet norm_num_groups None (no output norm) is not built by mobius")
        for width, heads in zip(c.block_out_channels, c.heads, strict=True):
            if width % heads:
                raise ConfigError(f"UNet width {width} does not split into {heads} heads")
        activation(c.act_fn)
        return c

    @classmethod
    def _read(cls, config: Any) -> UNet2DConditionConfig:
        for key, default in _DEFAULTS.items():
            value = getattr(config, key, default)
            if key == "only_cross_attention":  # a bool or one per block
                value = any(_flat(value))
            if key == "mid_block_only_cross_attention":  # None: only_cross_attention's, False
                value = value or None
            if value != default:
                raise ConfigError(f"UNet {key}={value!r} is not built by mobius")
        n = len(config.down_block_types)
        heads = getattr(config, "attention_head_dim", 8)  # diffusers: the head count
        return cls(
            in_channels=config.in_channels,
            out_channels=config.out_channels,
            down_block_types=tuple(config.down_block_types),
            up_block_types=tuple(config.up_block_types),
            mid_block_type=getattr(config, "mid_block_type", "UNetMidBlock2DCrossAttn"),
            block_out_channels=tuple(config.block_out_channels),
            layers_per_block=_per_block(
                getattr(config, "layers_per_block", 2), n, "layers_per_block"
            ),
            heads=_per_block(heads, n, "attention_head_dim"),
            cross_attention_dim=_per_block(
                getattr(config, "cross_attention_dim", 1280), n, "cross_attention_dim"
            ),
            transformer_layers=_per_block(
                getattr(config, "transformer_layers_per_block", 1),
                n,
                "transformer_layers_per_block",
            ),
            reverse_transformer_layers=getattr(
                config, "reverse_transformer_layers_per_block", None
            ),
            downsample_padding=getattr(config, "downsample_padding", 1),
            mid_block_scale_factor=getattr(config, "mid_block_scale_factor", 1.0),
            act_fn=getattr(config, "act_fn", "silu"),
            norm_num_groups=getattr(config, "norm_num_groups", 32),
            norm_eps=getattr(config, "norm_eps", 1e-5),
            use_linear_projection=getattr(config, "use_linear_projection", False),
            flip_sin_to_cos=getattr(config, "flip_sin_to_cos", True),
            freq_shift=getattr(config, "freq_shift", 0),
            resnet_time_scale_shift=getattr(config, "resnet_time_scale_shift", "default"),
            time_embedding_dim=getattr(config, "time_embedding_dim", None),
            time_embedding_act_fn=getattr(config, "time_embedding_act_fn", None),
            center_input_sample=getattr(config, "center_input_sample", False),
            conv_in_kernel=getattr(config, "conv_in_kernel", 3),
            conv_out_kernel=getattr(config, "conv_out_kernel", 3),
            addition_embed_type=getattr(config, "addition_embed_type", None),
            addition_time_embed_dim=getattr(config, "addition_time_embed_dim", None),
            projection_class_embeddings_input_dim=getattr(
                config, "projection_class_embeddings_input_dim", None
            ),
            time_cond_proj_dim=getattr(config, "time_cond_proj_dim", None),
            encoder_hid_dim_type=getattr(config, "encoder_hid_dim_type", None),
            encoder_hid_dim=getattr(config, "encoder_hid_dim", None),
            cross_attention_norm=getattr(config, "cross_attention_norm", None),
        )

    @property
    def time_embed_dim(self) -> int:
        return self.time_embedding_dim or self.block_out_channels[0] * 4

    @property
    def text_embeds_dim(self) -> int:
        """SDXL: the pooled text embedding's width (the add embedding's input less the time ids')."""
        return self.projection_class_embeddings_input_dim - 6 * self.addition_time_embed_dim

    def simple_attention(self, i: int, reverse: bool = False) -> SimpleCrossAttention:
        """The simple blocks' attention: ``attention_head_dim`` is, there, each head's width."""
        j = len(self.heads) - 1 - i if reverse else i
        return SimpleCrossAttention(
            self.heads[j],
            self.cross_attention_dim[j],
            self.norm_num_groups,
            self.cross_attention_norm == "group_norm",
        )

    def attention(self, i: int, reverse: bool = False) -> CrossAttention:
        j = len(self.heads) - 1 - i if reverse else i
        return CrossAttention(
            self.heads[j],
            self.cross_attention_dim[j],
            self.use_linear_projection,
            self.norm_num_groups,
            self.ip_adapter is not None,
        )


def _numbered(values: dict, prefix: str) -> list:
    """``values["{prefix}.0"]``, ``values["{prefix}.1"]``... in index order."""
    count = sum(name.startswith(f"{prefix}.") for name in values)
    return [values[f"{prefix}.{i}"] for i in range(count)]


def _flat(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


class UNetEncoder(Model):
    """What the UNet and the ControlNet share: ``conv_in``, the time embedding, the down and mid blocks."""

    def __init__(self, config: UNet2DConditionConfig) -> None:
        super().__init__()
        self.config = c = config
        widths = c.block_out_channels
        self.conv_in = Conv2d(
            c.in_channels, widths[0], c.conv_in_kernel, padding=(c.conv_in_kernel - 1) // 2
        )
        self.init_time_embedding(c)
        self.encoder_hid_proj = (
            ImageProjection(c.encoder_hid_dim, c.cross_attention_dim[0])
            if c.encoder_hid_dim_type == "image_proj"
            else None
        )
        self.down_blocks = nn.ModuleList([self.make_down_block(c, i) for i in range(len(widths))])
        self.mid_block = self.make_mid_block(c)

    def make_mid_block(self, c: UNet2DConditionConfig) -> UNetMidBlock2D | None:
        if c.mid_block_type is None:
            return None
        if c.mid_block_type == "UNetMidBlock2DSimpleCrossAttn":
            return UNetMidBlock2DSimpleCrossAttn(
                c.simple_attention(len(c.block_out_channels) - 1),
                c.block_out_channels[-1],
                c.time_embed_dim,
                c.norm_num_groups,
                c.norm_eps,
                c.act_fn,
                c.mid_block_scale_factor,
                c.resnet_time_scale_shift,
            )
        return UNetMidBlock2DCrossAttn(
            c.attention(len(c.block_out_channels) - 1),
            _per_layer(c.transformer_layers[-1], 1)[:1],
            c.block_out_channels[-1],
            c.time_embed_dim,
            c.norm_num_groups,
            c.norm_eps,
            c.act_fn,
            output_scale_factor=c.mid_block_scale_factor,
            time_embedding_norm=c.resnet_time_scale_shift,
        )

    def init_time_embedding(self, c: UNet2DConditionConfig) -> None:
        """``time_proj``, ``time_embedding`` (with LCM's ``cond_proj``) and SDXL's
        ``add_time_proj``/``add_embedding``."""
        self.time_proj = Timesteps(c.block_out_channels[0], c.flip_sin_to_cos, c.freq_shift)
        self.time_embedding = TimestepEmbedding(
            c.block_out_channels[0], c.time_embed_dim, c.act_fn, cond_proj_dim=c.time_cond_proj_dim
        )
        self.time_embed_act = (
            activation(c.time_embedding_act_fn) if c.time_embedding_act_fn else None
        )
        self.add_embedding = None
        if c.addition_embed_type == "text_time":
            self.add_time_proj = Timesteps(
                c.addition_time_embed_dim, c.flip_sin_to_cos, c.freq_shift
            )
            self.add_embedding = TimestepEmbedding(
                c.projection_class_embeddings_input_dim, c.time_embed_dim
            )
        elif c.addition_embed_type == "image":
            self.add_embedding = ImageTimeEmbedding(c.encoder_hid_dim, c.time_embed_dim)

    def make_down_block(self, c: UNet2DConditionConfig, i: int) -> DownBlock2D:
        widths = c.block_out_channels
        args = (
            widths[max(i - 1, 0)],
            widths[i],
            c.layers_per_block[i],
            c.time_embed_dim,
            c.norm_num_groups,
            c.norm_eps,
            c.act_fn,
            i < len(widths) - 1,
            c.downsample_padding,
            c.resnet_time_scale_shift,
        )
        kind = c.down_block_types[i]
        if kind == "DownBlock2D":
            return DownBlock2D(*args)
        if kind in ("ResnetDownsampleBlock2D", "SimpleCrossAttnDownBlock2D"):
            args = args[:8] + args[9:]  # no downsample_padding: the downsampler is a resnet
            if kind == "ResnetDownsampleBlock2D":
                return ResnetDownsampleBlock2D(*args)
            return SimpleCrossAttnDownBlock2D(c.simple_attention(i), *args)
        depths = _per_layer(c.transformer_layers[i], c.layers_per_block[i])
        return CrossAttnDownBlock2D(c.attention(i), depths, *args)

    def embed_time(
        self,
        op,
        sample,
        timestep,
        text_embeds=None,
        time_ids=None,
        timestep_cond=None,
        image_embeds=None,
    ):
        """The time embedding ``[batch, time_embed_dim]``; ``timestep`` broadcast to the batch.

        ``timestep_cond`` (LCM) is projected by ``time_embedding.cond_proj`` and added to
        the timestep's sinusoid; Kandinsky 2.2 adds ``add_embedding`` of ``image_embeds``.
        """
        batch = op.Shape(sample, start=0, end=1)
        t = op.Expand(op.Reshape(timestep, op.Constant(value_ints=[-1])), batch)
        if timestep_cond is not None:
            timestep_cond = op.CastLike(timestep_cond, sample)
        emb = self.time_embedding(op, self.time_proj(op, t, sample), timestep_cond)
        if self.config.addition_embed_type == "image":
            emb = op.Add(emb, self.add_embedding(op, image_embeds))
        elif self.add_embedding is not None:
            times = self.add_time_proj(
                op, op.Reshape(time_ids, op.Constant(value_ints=[-1])), sample
            )
            times = op.Reshape(times, op.Concat(batch, op.Constant(value_ints=[-1]), axis=0))
            added = op.Concat(op.CastLike(text_embeds, sample), times, axis=-1)
            emb = op.Add(emb, self.add_embedding(op, added))
        if self.time_embed_act is not None:
            emb = self.time_embed_act(op, emb)
        return emb

    def down(self, op, x, emb, context, features=()):
        """The down blocks and the mid block from ``conv_in``'s output: the result and every skip.

        ``features`` (a T2I-Adapter's, one per down block then one for the mid block)
        are added where diffusers adds ``down_intrablock_additional_residuals``.
        """
        features = list(features)
        skips = [x]
        for block in self.down_blocks:
            if features and isinstance(block, CrossAttnDownBlock2D):
                x, states = block(op, x, emb, context, residual=features.pop(0))
            else:
                x, states = block(op, x, emb, context)
                if features:  # diffusers adds it in place: the output is also the last skip
                    x = states[-1] = op.Add(x, features.pop(0))
            skips += states
        if self.mid_block is not None:
            x = self.mid_block(op, x, emb, context)
            if features:
                x = op.Add(x, features.pop(0))
        return x, skips

    def graph_inputs(self) -> dict[str, tuple[ir.DataType | None, list]]:
        """``sample``, ``timestep``, ``encoder_hidden_states`` (SDXL's ``text_embeds``, ``time_ids``;
        LCM's ``timestep_cond``); Kandinsky 2.2's ``image_embeds`` in place of the text."""
        c = self.config
        inputs = {
            "sample": (None, ["batch", c.in_channels, "latent_height", "latent_width"]),
            "timestep": (ir.DataType.FLOAT, ["batch"]),
        }
        if c.encoder_hid_dim_type == "image_proj":
            inputs["image_embeds"] = (None, ["batch", c.encoder_hid_dim])
        else:
            inputs["encoder_hidden_states"] = (
                None,
                ["batch", "sequence", c.cross_attention_dim[0]],
            )
        if c.addition_embed_type == "text_time":
            inputs["text_embeds"] = (None, ["batch", c.text_embeds_dim])
            inputs["time_ids"] = (None, ["batch", 6])
        if c.time_cond_proj_dim:
            inputs["timestep_cond"] = (None, ["batch", c.time_cond_proj_dim])
        if c.ip_adapter is not None:
            width = c.cross_attention_dim[0]
            inputs["ip_adapter_image_embeds"] = (None, ["batch", "image_tokens", width])
            inputs["ip_adapter_scale"] = (None, [])
        return inputs

    def residual_inputs(self) -> dict[str, tuple[ir.DataType | None, list]]:
        """The residual inputs :attr:`UNet2DConditionConfig.residuals` asks for (see the module docstring)."""
        c = self.config
        if c.residuals == "controlnet":
            names = [f"down_block_additional_residuals.{i}" for i in range(len(self.skip_widths()))]
            widths = [*self.skip_widths(), c.block_out_channels[-1]]
            names.append("mid_block_additional_residual")
        elif c.residuals == "adapter":
            widths = list(c.block_out_channels)
            if self.mid_block is not None:
                widths.append(c.block_out_channels[-1])
            names = [f"down_intrablock_additional_residuals.{i}" for i in range(len(widths))]
        else:
            return {}
        return {
            name: (None, ["batch", width, f"{name}_height", f"{name}_width"])
            for name, width in zip(names, widths, strict=True)
        }

    def skip_widths(self) -> list[int]:
        """The width of every skip the down path keeps: ``conv_in``'s, each layer's, each downsample's."""
        c = self.config
        widths = [c.block_out_channels[0]]
        for i, width in enumerate(c.block_out_channels):
            widths += [width] * (c.layers_per_block[i] + (i < len(c.block_out_channels) - 1))
        return widths


class UNet2DConditionModel(UNetEncoder):
    """diffusers' ``UNet2DConditionModel`` (SD 1.x/2.x and SDXL layouts)."""

    config_class = UNet2DConditionConfig
    task = "denoising"

    def __init__(self, config: UNet2DConditionConfig) -> None:
        super().__init__(config)
        c, widths = config, config.block_out_channels
        self.up_blocks = nn.ModuleList([self.make_up_block(c, i) for i in range(len(widths))])
        self.conv_norm_out = GroupNorm(c.norm_num_groups, widths[0], c.norm_eps)
        self.act = activation(c.act_fn)
        self.conv_out = Conv2d(
            widths[0], c.out_channels, c.conv_out_kernel, padding=(c.conv_out_kernel - 1) // 2
        )

    def make_up_block(self, c: UNet2DConditionConfig, i: int) -> UpBlock2D:
        widths = list(reversed(c.block_out_channels))
        layers = list(reversed(c.layers_per_block))[i] + 1
        prev, out = widths[max(i - 1, 0)], widths[i]
        skip_last = widths[min(i + 1, len(widths) - 1)]
        in_channels = [
            (prev if j == 0 else out) + (skip_last if j == layers - 1 else out)
            for j in range(layers)
        ]
        args = (
            in_channels,
            out,
            c.time_embed_dim,
            c.norm_num_groups,
            c.norm_eps,
            c.act_fn,
            i < len(widths) - 1,
            c.resnet_time_scale_shift,
        )
        kind = c.up_block_types[i]
        if kind == "UpBlock2D":
            return UpBlock2D(*args)
        if kind == "ResnetUpsampleBlock2D":
            return ResnetUpsampleBlock2D(*args)
        if kind == "SimpleCrossAttnUpBlock2D":
            return SimpleCrossAttnUpBlock2D(c.simple_attention(i, reverse=True), *args)
        reverse = c.reverse_transformer_layers or list(reversed(c.transformer_layers))
        return CrossAttnUpBlock2D(
            c.attention(i, reverse=True), _per_layer(reverse[i], layers), *args
        )

    def forward(
        self,
        op,
        sample,
        timestep,
        encoder_hidden_states=None,
        text_embeds=None,
        time_ids=None,
        timestep_cond=None,
        image_embeds=None,
        ip_adapter_image_embeds=None,
        ip_adapter_scale=None,
        **residuals,
    ):
        emb = self.embed_time(
            op, sample, timestep, text_embeds, time_ids, timestep_cond, image_embeds
        )
        if self.encoder_hid_proj is not None:  # Kandinsky 2.2: the image is the context
            encoder_hidden_states = self.encoder_hid_proj(op, image_embeds)
        if ip_adapter_image_embeds is not None:  # what every IP-Adapter attention reads
            encoder_hidden_states = IPContext(
                encoder_hidden_states, ip_adapter_image_embeds, ip_adapter_scale
            )
        if self.config.center_input_sample:
            sample = op.Sub(op.Mul(sample, op.CastLike(2.0, sample)), op.CastLike(1.0, sample))
        features = _numbered(residuals, "down_intrablock_additional_residuals")
        x, skips = self.down(op, self.conv_in(op, sample), emb, encoder_hidden_states, features)
        if "mid_block_additional_residual" in residuals:  # a ControlNet's residuals
            controlnet = _numbered(residuals, "down_block_additional_residuals")
            skips = [op.Add(skip, r) for skip, r in zip(skips, controlnet, strict=True)]
            x = op.Add(x, residuals["mid_block_additional_residual"])
        return self.decode(op, x, emb, encoder_hidden_states, skips)

    def decode(self, op, x, emb, context, skips):
        """The up blocks over the skips, newest first, then the output norm and conv."""
        for block in self.up_blocks:
            n = len(block.resnets)
            skips, mine = skips[:-n], skips[-n:]
            x = block(op, x, emb, context, mine, upsample_like=skips[-1] if skips else None)
        return self.conv_out(op, self.act(op, self.conv_norm_out(op, x)))

    def sanitize(self, weights: dict) -> dict:
        """With ``--ip-adapter``, the adapter file's ``to_k_ip``/``to_v_ip`` tensors added
        (and a FaceID LoRA merged)."""
        if self.config.ip_adapter is None:
            return weights
        return {**weights, **ip_adapter_weights(self, self.config.ip_adapter, weights)}

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        outputs = {"out_sample": ["batch", c.out_channels, "latent_height", "latent_width"]}
        return {
            "model": GraphSpec(
                {**self.graph_inputs(), **self.residual_inputs()},
                outputs,
                lambda op, **inputs: {"out_sample": self(op, **inputs)},
            )
        }


MODEL_TYPES = {"UNet2DConditionModel": UNet2DConditionModel}
