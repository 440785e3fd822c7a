"""Flux's ControlNet: the double- and single-stream blocks, each one's image tokens a residual.

The packed latents are embedded (``x_embedder``) and the condition added through
``controlnet_x_embedder``: the packed VAE latents of the condition image, or (with
``conditioning_embedding_channels``) the condition image itself, brought down 8x by
``input_hint_block`` (the UNet ControlNet's conditioning embedding) and cut into
``patch_size`` patches. A union ControlNet (``num_mode``) puts an embedding of the
control type (``controlnet_mode_embedder``) before the text tokens, at the first text
token's position. Each double block's (``controlnet_blocks.{i}``) and each single
block's (``controlnet_single_blocks.{i}``) image tokens go through a linear, times
``conditioning_scale``. Module tree and names follow diffusers' ``FluxControlNetModel``.

Graph (:class:`mobius.tasks.ControlNetTask`): the transformer's inputs
(``hidden_states`` [batch, image_tokens, in_channels], ``encoder_hidden_states``,
``pooled_projections``, ``timestep`` (``t / 1000``), ``img_ids``, ``txt_ids``, and
``guidance``) plus ``controlnet_cond`` ([batch, image_tokens, in_channels], or
[batch, 3, height, width] pixels with an ``input_hint_block``), ``controlnet_mode``
int64 [batch, 1] (union only) and ``conditioning_scale`` (a scalar) ->
``controlnet_block_samples.{i}`` and ``controlnet_single_block_samples.{i}``
[batch, image_tokens, inner_dim].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, Linear
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._checks import config_int
from mobius_diffusion.models._dit_blocks import (
    AxesRotary,
    CombinedTimestepTextProjEmbeddings,
    JointTransformerBlock,
)
from mobius_diffusion.models.controlnet import ControlNetConditioningEmbedding
from mobius_diffusion.models.flux import (
    CombinedTimestepGuidanceTextProjEmbeddings,
    FluxConfig,
    FluxSingleTransformerBlock,
    image_tokens,
    joint_rotary,
)
from mobius_diffusion.tasks import GraphSpec

#: diffusers' fixed widths of the Flux ControlNet's ``input_hint_block``.
HINT_WIDTHS = (16, 16, 16, 16)


@dataclass
class FluxControlNetConfig(FluxConfig):
    num_mode: int | None = None
    conditioning_embedding_channels: int | None = None

    @classmethod
    def from_hf(cls, config: Any) -> FluxControlNetConfig:
        base = FluxConfig.from_hf(config)
        num_mode = getattr(config, "num_mode", None)
        hint = getattr(config, "conditioning_embedding_channels", None)
        if num_mode is not None:
            num_mode = config_int(config, "num_mode")
        if hint is not None:
            hint = config_int(config, "conditioning_embedding_channels")
            if hint * base.patch_size**2 != base.in_channels:
                raise ConfigError(
                    f"FluxControlNetModel conditioning_embedding_channels {hint} times "
                    f"patch_size² must equal in_channels {base.in_channels}"
                )
        return cls(**vars(base), num_mode=num_mode, conditioning_embedding_channels=hint)


def patch_tokens(op, x, patch_size: int, channels: int):
    """``[b, c, H, W]`` -> ``[b, (H/p)*(W/p), c*p*p]``, channels then the patch's rows, columns."""
    p = op.Constant(value_ints=[patch_size])
    h, w = (op.Div(op.Shape(x, start=i, end=i + 1), p) for i in (2, 3))
    x = op.Reshape(x, op.Concat(op.Constant(value_ints=[0, 0]), h, p, w, p, axis=0))
    x = op.Transpose(x, perm=[0, 2, 4, 1, 3, 5])  # [b, h, w, c, p, p]
    return op.Reshape(x, op.Constant(value_ints=[0, -1, channels * patch_size * patch_size]))


class FluxControlNetModel(Model):
    """diffusers' ``FluxControlNetModel`` (InstantX's and Shakker-Labs' ControlNets, union too)."""

    config_class = FluxControlNetConfig
    task = "controlnet"

    def __init__(self, config: FluxControlNetConfig) -> None:
        super().__init__()
        self.config = config
        dim, heads, head_dim = (
            config.inner_dim,
            config.num_attention_heads,
            config.attention_head_dim,
        )
        self.pos_embed = AxesRotary(config.axes_dims_rope)
        embed = (
            CombinedTimestepGuidanceTextProjEmbeddings
            if config.guidance_embeds
            else CombinedTimestepTextProjEmbeddings
        )
        self.time_text_embed = embed(dim, config.pooled_projection_dim)
        self.context_embedder = Linear(config.joint_attention_dim, dim, bias=True)
        self.x_embedder = Linear(config.in_channels, dim, bias=True)
        self.transformer_blocks = nn.ModuleList(
            [
                JointTransformerBlock(dim, heads, head_dim, qk_norm=True)
                for _ in range(config.num_layers)
            ]
        )
        self.single_transformer_blocks = nn.ModuleList(
            [
                FluxSingleTransformerBlock(dim, heads, head_dim)
                for _ in range(config.num_single_layers)
            ]
        )
        self.controlnet_blocks = nn.ModuleList(
            [Linear(dim, dim, bias=True) for _ in range(config.num_layers)]
        )
        self.controlnet_single_blocks = nn.ModuleList(
            [Linear(dim, dim, bias=True) for _ in range(config.num_single_layers)]
        )
        if config.num_mode is not None:
            self.controlnet_mode_embedder = Embedding(config.num_mode, dim)
        if config.conditioning_embedding_channels is not None:
            self.input_hint_block = ControlNetConditioningEmbedding(
                config.conditioning_embedding_channels, 3, HINT_WIDTHS
            )
        self.controlnet_x_embedder = Linear(config.in_channels, dim, bias=True)

    def forward(
        self,
        op,
        hidden_states,
        encoder_hidden_states,
        pooled_projections,
        timestep,
        img_ids,
        txt_ids,
        controlnet_cond,
        conditioning_scale,
        controlnet_mode=None,
        guidance=None,
    ):
        c = self.config
        if c.conditioning_embedding_channels is not None:
            hint = self.input_hint_block(op, controlnet_cond)  # [b, channels, H / 8, W / 8]
            controlnet_cond = patch_tokens(
                op, hint, c.patch_size, c.conditioning_embedding_channels
            )
        hidden = op.Add(
            self.x_embedder(op, hidden_states), self.controlnet_x_embedder(op, controlnet_cond)
        )
        timestep = op.Mul(timestep, 1000.0)  # the pipeline passes t / 1000
        if guidance is None:
            temb = self.time_text_embed(op, timestep, pooled_projections)
        else:
            temb = self.time_text_embed(op, timestep, pooled_projections, op.Mul(guidance, 1000.0))
        context = self.context_embedder(op, encoder_hidden_states)
        if c.num_mode is not None:  # the mode token leads the text, at the first token's position
            mode = self.controlnet_mode_embedder(op, controlnet_mode)  # [batch, 1, dim]
            context = op.Concat(mode, context, axis=1)
            txt_ids = op.Concat(op.Slice(txt_ids, [0], [1], [0]), txt_ids, axis=0)
        rotary = joint_rotary(op, self.pos_embed, hidden, txt_ids, img_ids)
        outputs = {}
        for i, (block, out) in enumerate(
            zip(self.transformer_blocks, self.controlnet_blocks, strict=True)
        ):
            context, hidden = block(op, hidden, context, temb, rotary)
            outputs[f"controlnet_block_samples.{i}"] = op.Mul(out(op, hidden), conditioning_scale)
        joint = op.Concat(context, hidden, axis=1)
        for i, (block, out) in enumerate(
            zip(self.single_transformer_blocks, self.controlnet_single_blocks, strict=True)
        ):
            joint = block(op, joint, temb, rotary)
            sample = out(op, image_tokens(op, joint, context))
            outputs[f"controlnet_single_block_samples.{i}"] = op.Mul(sample, conditioning_scale)
        return outputs

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        axes = len(c.axes_dims_rope)
        inputs = {
            "hidden_states": (None, ["batch", "image_tokens", c.in_channels]),
            "encoder_hidden_states": (None, ["batch", "sequence", c.joint_attention_dim]),
            "pooled_projections": (None, ["batch", c.pooled_projection_dim]),
            "timestep": (None, ["batch"]),
            "img_ids": (None, ["image_tokens", axes]),
            "txt_ids": (None, ["sequence", axes]),
            "controlnet_cond": (None, ["batch", "image_tokens", c.in_channels]),
            "conditioning_scale": (None, []),
        }
        if c.conditioning_embedding_channels is not None:
            inputs["controlnet_cond"] = (None, ["batch", 3, "height", "width"])
        if c.num_mode is not None:
            inputs["controlnet_mode"] = (ir.DataType.INT64, ["batch", 1])
        if c.guidance_embeds:
            inputs["guidance"] = (None, ["batch"])
        tokens = ["batch", "image_tokens", c.inner_dim]
        outputs = {f"controlnet_block_samples.{i}": tokens for i in range(c.num_layers)}
        outputs.update(
            {f"controlnet_single_block_samples.{i}": tokens for i in range(c.num_single_layers)}
        )
        return {"model": GraphSpec(inputs, outputs, lambda op, **values: self(op, **values))}


MODEL_TYPES = {"FluxControlNetModel": FluxControlNetModel}
