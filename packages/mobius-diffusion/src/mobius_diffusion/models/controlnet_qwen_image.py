"""Qwen-Image's ControlNet: the transformer's blocks, each one's image tokens a residual.

The packed latents are embedded (``img_in``) and the packed VAE latents of the
condition image added through ``controlnet_x_embedder`` (with
``extra_condition_channels`` more channels: the inpainting ControlNet's mask). The
text, timestep, rotary positions and padding mask are the transformer's; each
block's image tokens go through a linear (``controlnet_blocks.{i}``), times
``conditioning_scale``. Module tree and names follow diffusers'
``QwenImageControlNetModel`` checkpoints.

Graph (:class:`mobius.tasks.ControlNetTask`): the transformer's inputs
(``hidden_states`` [batch, image_tokens, in_channels], ``encoder_hidden_states``,
``encoder_hidden_states_mask`` int64, ``timestep`` (``t / 1000``), ``img_shapes``
int64 [images, 3]) plus ``controlnet_cond`` [batch, image_tokens, in_channels +
extra_condition_channels] and ``conditioning_scale`` (a scalar) ->
``controlnet_block_samples.{i}`` [batch, image_tokens, inner_dim], one per block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, RMSNorm
from mobius.model import Model
from mobius_diffusion.models._checks import config_int
from mobius_diffusion.models._dit_blocks import AxesRotary
from mobius_diffusion.models.flux import joint_rotary
from mobius_diffusion.models.qwen_image import (
    QwenImageConfig,
    QwenImageTransformerBlock,
    QwenTimestepProjEmbeddings,
    image_position_ids,
    text_padding_bias,
    text_position_ids,
)
from mobius_diffusion.tasks import GraphSpec


@dataclass
class QwenImageControlNetConfig(QwenImageConfig):
    extra_condition_channels: int = 0

    @classmethod
    def from_hf(cls, config: Any) -> QwenImageControlNetConfig:
        base = QwenImageConfig.from_hf(config)  # refuses the transformer's unbuilt options too
        extra = config_int(config, "extra_condition_channels", 0, low=0)
        return cls(**vars(base), extra_condition_channels=extra)


class QwenImageControlNetModel(Model):
    """diffusers' ``QwenImageControlNetModel`` (InstantX's Qwen-Image ControlNets, inpainting)."""

    config_class = QwenImageControlNetConfig
    task = "controlnet"

    def __init__(self, config: QwenImageControlNetConfig) -> None:
        super().__init__()
        self.config = config
        dim = config.inner_dim
        self.pos_embed = AxesRotary(config.axes_dims_rope)
        self.time_text_embed = QwenTimestepProjEmbeddings(dim)
        self.txt_norm = RMSNorm(config.joint_attention_dim, 1e-6)
        self.img_in = Linear(config.in_channels, dim, bias=True)
        self.txt_in = Linear(config.joint_attention_dim, dim, bias=True)
        self.transformer_blocks = nn.ModuleList(
            [
                QwenImageTransformerBlock(
                    dim, config.num_attention_heads, config.attention_head_dim
                )
                for _ in range(config.num_layers)
            ]
        )
        self.controlnet_blocks = nn.ModuleList(
            [Linear(dim, dim, bias=True) for _ in range(config.num_layers)]
        )
        cond_channels = config.in_channels + config.extra_condition_channels
        self.controlnet_x_embedder = Linear(cond_channels, dim, bias=True)

    def forward(
        self,
        op,
        hidden_states,
        encoder_hidden_states,
        encoder_hidden_states_mask,
        timestep,
        img_shapes,
        controlnet_cond,
        conditioning_scale,
    ):
        hidden = op.Add(
            self.img_in(op, hidden_states), self.controlnet_x_embedder(op, controlnet_cond)
        )
        temb = self.time_text_embed(op, timestep, hidden)
        context = self.txt_in(op, self.txt_norm(op, encoder_hidden_states))
        sequence = op.Shape(context, start=1, end=2)
        tokens = op.Shape(hidden, start=1, end=2)
        rotary = joint_rotary(
            op,
            self.pos_embed,
            hidden,
            text_position_ids(op, img_shapes, sequence),
            image_position_ids(op, img_shapes, tokens),
        )
        bias = text_padding_bias(op, encoder_hidden_states_mask, hidden, op.Add(sequence, tokens))
        outputs = {}
        for i, (block, out) in enumerate(
            zip(self.transformer_blocks, self.controlnet_blocks, strict=True)
        ):
            context, hidden = block(op, hidden, context, temb, rotary, bias)
            outputs[f"controlnet_block_samples.{i}"] = op.Mul(out(op, hidden), conditioning_scale)
        return outputs

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        cond_channels = c.in_channels + c.extra_condition_channels
        inputs = {
            "hidden_states": (None, ["batch", "image_tokens", c.in_channels]),
            "encoder_hidden_states": (None, ["batch", "sequence", c.joint_attention_dim]),
            "encoder_hidden_states_mask": (ir.DataType.INT64, ["batch", "sequence"]),
            "timestep": (None, ["batch"]),
            "img_shapes": (ir.DataType.INT64, ["images", 3]),
            "controlnet_cond": (None, ["batch", "image_tokens", cond_channels]),
            "conditioning_scale": (None, []),
        }
        outputs = {
            f"controlnet_block_samples.{i}": ["batch", "image_tokens", c.inner_dim]
            for i in range(c.num_layers)
        }
        return {"model": GraphSpec(inputs, outputs, lambda op, **values: self(op, **values))}


MODEL_TYPES = {"QwenImageControlNetModel": QwenImageControlNetModel}
