"""UNetMotionModel: AnimateDiff's denoiser, an SD UNet with motion modules over the frames.

The frames fold into the batch, as diffusers does: ``[b, C, f, h, w]`` becomes
``[b * f, C, h, w]`` for the UNet's 2-D blocks, whose time embedding and text states
are repeated for every frame of their video. After each layer of every block (each
resnet, or resnet and transformer) and, with ``use_motion_mid_block``, after each
transformer of the mid-block, a motion module (``AnimateDiffTransformer3D``) mixes
the frames: each pixel's ``f`` states attend to each other, two self-attentions with
sinusoidal frame positions (``pos_embed.pe``, a buffer the checkpoint holds) and a
GEGLU feed-forward. Everything else is :mod:`.unet_2d_condition`'s UNet; the output
conv's activation is SiLU whatever ``act_fn`` (diffusers hard-codes it).

Graph (:class:`mobius.tasks.DenoisingTask`): ``sample`` [batch, in_channels, frames,
latent_height, latent_width], ``timestep`` float32 [batch], ``encoder_hidden_states``
[batch, sequence, cross_attention_dim], one row per video (diffusers' pipelines repeat
each row for every frame before the call; the graph repeats it itself); AnimateDiff
SDXL adds ``text_embeds`` and ``time_ids``, AnimateLCM ``timestep_cond`` ->
``out_sample`` [batch, out_channels, frames, latent_height, latent_width].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mobius.errors import ConfigError
from mobius_diffusion.models._checks import config_int
from mobius_diffusion.models._motion_blocks import (
    CrossAttnDownBlockMotion,
    CrossAttnUpBlockMotion,
    DownBlockMotion,
    Motion,
    UNetMidBlockCrossAttnMotion,
    UpBlockMotion,
)
from mobius_diffusion.models._resnet import DownBlock2D, UpBlock2D, activation
from mobius_diffusion.models.unet_2d_condition import (
    UNet2DConditionConfig,
    UNet2DConditionModel,
    _per_block,
    _per_layer,
)
from mobius_diffusion.tasks import GraphSpec

#: diffusers' motion block types -> the 2-D blocks they add motion modules to.
_DOWN = {"CrossAttnDownBlockMotion": "CrossAttnDownBlock2D", "DownBlockMotion": "DownBlock2D"}
_UP = {"CrossAttnUpBlockMotion": "CrossAttnUpBlock2D", "UpBlockMotion": "UpBlock2D"}


def _ints(op, values):
    return op.Constant(value_ints=list(values))


def _positive(name: str, value: Any) -> Any:
    """``value``: a positive int or a list of them (one per layer), else ConfigError."""
    for v in value if isinstance(value, (list, tuple)) else [value]:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"UNetMotionModel {name} holds {v!r}: not a positive integer")
    return value


@dataclass
class UNetMotionConfig(UNet2DConditionConfig):
    motion_heads: list[int] = field(default_factory=list)
    motion_max_seq_length: int = 32
    temporal_layers: list = field(default_factory=list)
    reverse_temporal_layers: list | None = None
    use_motion_mid_block: bool = True
    mid_transformer_layers: list[int] = field(default_factory=lambda: [1])
    mid_temporal_layers: list[int] = field(default_factory=lambda: [1])

    @classmethod
    def from_hf(cls, config: Any) -> UNetMotionConfig:
        for key in ("encoder_hid_dim", "encoder_hid_dim_type"):  # IP-Adapter image projection
            if getattr(config, key, None) is not None:
                raise ConfigError(f"UNetMotionModel {key} is not built by mobius")
        down, up = list(config.down_block_types), list(config.up_block_types)
        if (
            any(t not in _DOWN for t in down)
            or any(t not in _UP for t in up)
            or len(up) != len(down)
        ):
            raise ConfigError(
                f"UNetMotionModel blocks {down} / {up}: mobius builds {list(_DOWN)} and {list(_UP)}"
            )
        n = len(down)

        def blocks(name, default):
            return [_positive(name, v) for v in _per_block(getattr(config, name, default), n, name)]

        transformer_layers = blocks("transformer_layers_per_block", 1)
        reverse = getattr(config, "reverse_transformer_layers_per_block", None)
        reverse_temporal = getattr(config, "reverse_temporal_transformer_layers_per_block", None)
        mid_layers = config_int(config, "mid_block_layers", 1)
        mid_transformer = getattr(config, "transformer_layers_per_mid_block", None)
        if mid_transformer is None:  # diffusers: the last block's depth, if one number
            last = transformer_layers[-1]
            mid_transformer = last if isinstance(last, int) else 1
        use_motion_mid_block = getattr(config, "use_motion_mid_block", True)
        if not isinstance(use_motion_mid_block, bool):
            raise ConfigError(f"UNetMotionModel use_motion_mid_block {use_motion_mid_block!r}")
        c = cls(
            in_channels=config_int(config, "in_channels", 4),
            out_channels=config_int(config, "out_channels", 4),
            down_block_types=tuple(_DOWN[t] for t in down),
            up_block_types=tuple(_UP[t] for t in up),
            block_out_channels=tuple(_positive("block_out_channels", config.block_out_channels)),
            layers_per_block=blocks("layers_per_block", 2),
            heads=blocks("num_attention_heads", 8),
            cross_attention_dim=blocks("cross_attention_dim", 1280),
            transformer_layers=transformer_layers,
            reverse_transformer_layers=None
            if reverse is None
            else blocks("reverse_transformer_layers_per_block", None),
            downsample_padding=getattr(config, "downsample_padding", 1),
            mid_block_scale_factor=getattr(config, "mid_block_scale_factor", 1.0),
            act_fn=getattr(config, "act_fn", "silu"),
            norm_num_groups=config_int(config, "norm_num_groups", 32),
            norm_eps=getattr(config, "norm_eps", 1e-5),
            use_linear_projection=getattr(config, "use_linear_projection", False),
            addition_embed_type=getattr(config, "addition_embed_type", None),
            addition_time_embed_dim=getattr(config, "addition_time_embed_dim", None),
            projection_class_embeddings_input_dim=getattr(
                config, "projection_class_embeddings_input_dim", None
            ),
            time_cond_proj_dim=getattr(config, "time_cond_proj_dim", None),
            # diffusers reads no reverse_motion_num_attention_heads: the up blocks reverse these
            motion_heads=blocks("motion_num_attention_heads", 8),
            motion_max_seq_length=config_int(config, "motion_max_seq_length", 32),
            temporal_layers=blocks("temporal_transformer_layers_per_block", 1),
            reverse_temporal_layers=None
            if reverse_temporal is None
            else blocks("reverse_temporal_transformer_layers_per_block", None),
            use_motion_mid_block=use_motion_mid_block,
            mid_transformer_layers=_per_layer(
                _positive("transformer_layers_per_mid_block", mid_transformer), mid_layers
            ),
            mid_temporal_layers=_per_layer(
                _positive(
                    "temporal_transformer_layers_per_mid_block",
                    getattr(config, "temporal_transformer_layers_per_mid_block", 1),
                ),
                mid_layers,
            ),
        )
        if len(c.block_out_channels) != n:
            raise ConfigError(
                "UNetMotionModel block_out_channels and down_block_types differ in length"
            )
        if {len(c.mid_transformer_layers), len(c.mid_temporal_layers)} != {mid_layers}:
            raise ConfigError(f"UNetMotionModel mid-block depths do not list {mid_layers} layers")
        if c.addition_embed_type not in (None, "text_time"):
            raise ConfigError(
                f"UNetMotionModel addition_embed_type {c.addition_embed_type!r} is not built by mobius"
            )
        if c.time_cond_proj_dim is not None:
            _positive("time_cond_proj_dim", c.time_cond_proj_dim)
        for width, heads, motion in zip(c.block_out_channels, c.heads, c.motion_heads, strict=True):
            if width % heads or width % motion:
                raise ConfigError(f"UNetMotionModel width {width} does not split into heads")
        activation(c.act_fn)
        return c

    def motion(self, i: int) -> Motion:
        return Motion(self.motion_heads[i], self.norm_num_groups, self.motion_max_seq_length)


def _repeat_frames(op, x, frames):
    """``[b, ...]`` -> ``[b * f, ...]``, each row repeated ``f`` times (``repeat_interleave``)."""
    rest = op.Shape(x, start=1)
    expanded = op.Expand(
        op.Unsqueeze(x, _ints(op, [1])),
        op.Concat(op.Shape(x, start=0, end=1), frames, rest, axis=0),
    )
    return op.Reshape(expanded, op.Concat(_ints(op, [-1]), rest, axis=0))


class UNetMotionModel(UNet2DConditionModel):
    """diffusers' ``UNetMotionModel``; see the module docstring for the graph."""

    config_class = UNetMotionConfig

    def __init__(self, config: UNetMotionConfig) -> None:
        super().__init__(config)
        self.act = activation("silu")  # diffusers' conv_act, whatever act_fn

    def _block_args(self, c: UNetMotionConfig, i: int) -> tuple:
        widths = c.block_out_channels
        return (
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

    def make_down_block(self, c: UNetMotionConfig, i: int) -> DownBlock2D:
        layers = c.layers_per_block[i]
        motion = (c.motion(i), _per_layer(c.temporal_layers[i], layers))
        if c.down_block_types[i] == "DownBlock2D":
            return DownBlockMotion(*motion, *self._block_args(c, i))
        depths = _per_layer(c.transformer_layers[i], layers)
        return CrossAttnDownBlockMotion(*motion, c.attention(i), depths, *self._block_args(c, i))

    def make_mid_block(self, c: UNetMotionConfig) -> UNetMidBlockCrossAttnMotion:
        last = len(c.block_out_channels) - 1
        return UNetMidBlockCrossAttnMotion(
            c.motion(last) if c.use_motion_mid_block else None,
            c.mid_temporal_layers,
            c.attention(last),
            c.mid_transformer_layers,
            c.block_out_channels[-1],
            c.time_embed_dim,
            c.norm_num_groups,
            c.norm_eps,
            c.act_fn,
            output_scale_factor=c.mid_block_scale_factor,
            time_embedding_norm=c.resnet_time_scale_shift,
        )

    def make_up_block(self, c: UNetMotionConfig, i: int) -> UpBlock2D:
        n = len(c.block_out_channels)
        widths = list(reversed(c.block_out_channels))
        layers = list(reversed(c.layers_per_block))[i] + 1
        prev, out, skip_last = widths[max(i - 1, 0)], widths[i], widths[min(i + 1, n - 1)]
        in_channels = [
            (prev if j == 0 else out) + (skip_last if j == layers - 1 else out)
            for j in range(layers)
        ]
        args = (in_channels, out, c.time_embed_dim, c.norm_num_groups, c.norm_eps, c.act_fn)
        args += (i < n - 1, c.resnet_time_scale_shift)
        temporal = c.reverse_temporal_layers or list(reversed(c.temporal_layers))
        motion = (c.motion(n - 1 - i), _per_layer(temporal[i], layers))
        if c.up_block_types[i] == "UpBlock2D":
            return UpBlockMotion(*motion, *args)
        reverse = c.reverse_transformer_layers or list(reversed(c.transformer_layers))
        attention = c.attention(i, reverse=True)
        return CrossAttnUpBlockMotion(*motion, attention, _per_layer(reverse[i], layers), *args)

    def forward(
        self,
        op,
        sample,
        timestep,
        encoder_hidden_states,
        text_embeds=None,
        time_ids=None,
        timestep_cond=None,
    ):
        frames = op.Shape(sample, start=2, end=3)
        emb = self.embed_time(op, sample, timestep, text_embeds, time_ids, timestep_cond)
        context = (_repeat_frames(op, encoder_hidden_states, frames), frames)
        channels, pixels = op.Shape(sample, start=1, end=2), op.Shape(sample, start=3)
        x = op.Reshape(
            op.Transpose(sample, perm=[0, 2, 1, 3, 4]),
            op.Concat(_ints(op, [-1]), channels, pixels, axis=0),
        )  # [b * f, C, h, w]
        emb = _repeat_frames(op, emb, frames)
        x, skips = self.down(op, self.conv_in(op, x), emb, context)
        x = self.decode(op, x, emb, context, skips)
        video = op.Concat(_ints(op, [-1]), frames, op.Shape(x, start=1), axis=0)
        return op.Transpose(op.Reshape(x, video), perm=[0, 2, 1, 3, 4])

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        if c.residuals:
            raise ConfigError(
                f"UNetMotionModel with {c.residuals} residuals is not built by mobius"
            )
        inputs = self.graph_inputs()
        video = ["batch", "frames", "latent_height", "latent_width"]
        inputs["sample"] = (None, [video[0], c.in_channels, *video[1:]])
        outputs = {"out_sample": [video[0], c.out_channels, *video[1:]]}
        return {
            "model": GraphSpec(inputs, outputs, lambda op, **kw: {"out_sample": self(op, **kw)})
        }


MODEL_TYPES = {"UNetMotionModel": UNetMotionModel}
