"""Sana's ControlNet: the transformer's linear-attention blocks, each one's tokens a residual.

The condition latents go through the same patch embedding as the latents
(``patch_embed``, its position table included when there is one), then a linear
(``input_block``), and are added. The timestep, the caption and its padding mask
are the transformer's; each block's tokens go through a linear
(``controlnet_blocks.{i}``), times ``conditioning_scale``. diffusers' class has no
Sana-Sprint options (``guidance_embeds``, ``qk_norm``), and neither has this one.
Module tree and names follow diffusers' ``SanaControlNetModel`` checkpoints.

Graph (:class:`mobius.tasks.ControlNetTask`): the transformer's inputs
(``hidden_states`` [batch, in_channels, latent_height, latent_width],
``encoder_hidden_states``, ``encoder_attention_mask`` int64, ``timestep``) plus
``controlnet_cond`` (the condition image's latents, ``hidden_states``' shape) and
``conditioning_scale`` (a scalar) -> ``controlnet_block_samples.{i}`` [batch,
image_tokens, inner_dim], one per block.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, RMSNorm
from mobius.model import Model
from mobius_diffusion.models._dit_blocks import PatchEmbed, TextProjection
from mobius_diffusion.models.pixart import AdaLayerNormSingle, caption_bias
from mobius_diffusion.models.sana import SanaConfig, SanaTransformerBlock, UnpositionedPatchEmbed
from mobius_diffusion.tasks import GraphSpec


@dataclass
class SanaControlNetConfig(SanaConfig):
    @classmethod
    def from_hf(cls, config: Any) -> SanaControlNetConfig:
        # diffusers' SanaControlNetModel takes no guidance_embeds or qk_norm: its blocks have none.
        base = replace(SanaConfig.from_hf(config), guidance_embeds=False, qk_norm=None)
        return cls(**vars(base))


class SanaControlNetModel(Model):
    """diffusers' ``SanaControlNetModel`` (Sana 600M / 1.6B ControlNets)."""

    config_class = SanaControlNetConfig
    task = "controlnet"

    def __init__(self, config: SanaControlNetConfig) -> None:
        super().__init__()
        self.config = config
        dim, p = config.inner_dim, config.patch_size
        if config.interpolation_scale is None:  # diffusers' pos_embed_type None
            self.patch_embed = UnpositionedPatchEmbed(p, config.in_channels, dim)
        else:
            base = config.sample_size // p
            self.patch_embed = PatchEmbed(
                p, config.in_channels, dim, base, config.interpolation_scale
            )
        self.time_embed = AdaLayerNormSingle(dim, use_additional_conditions=False)
        self.caption_projection = TextProjection(config.caption_channels, dim)
        self.caption_norm = RMSNorm(dim, 1e-5)
        self.transformer_blocks = nn.ModuleList(
            [SanaTransformerBlock(config) for _ in range(config.num_layers)]
        )
        self.input_block = Linear(dim, dim, bias=True)
        self.controlnet_blocks = nn.ModuleList(
            [Linear(dim, dim, bias=True) for _ in range(config.num_layers)]
        )

    def forward(
        self,
        op,
        hidden_states,
        encoder_hidden_states,
        encoder_attention_mask,
        timestep,
        controlnet_cond,
        conditioning_scale,
    ):
        hidden, h, w = self.patch_embed(op, hidden_states)
        cond, _, _ = self.patch_embed(op, controlnet_cond)
        hidden = op.Add(hidden, self.input_block(op, cond))
        block_emb, _ = self.time_embed(op, timestep, hidden)
        context = self.caption_norm(op, self.caption_projection(op, encoder_hidden_states))
        bias = caption_bias(op, encoder_attention_mask, hidden)
        outputs = {}
        for i, (block, out) in enumerate(
            zip(self.transformer_blocks, self.controlnet_blocks, strict=True)
        ):
            hidden = block(op, hidden, context, bias, block_emb, h, w)
            outputs[f"controlnet_block_samples.{i}"] = op.Mul(out(op, hidden), conditioning_scale)
        return outputs

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        latent = ["batch", c.in_channels, "latent_height", "latent_width"]
        inputs = {
            "hidden_states": (None, latent),
            "encoder_hidden_states": (None, ["batch", "sequence", c.caption_channels]),
            "encoder_attention_mask": (ir.DataType.INT64, ["batch", "sequence"]),
            "timestep": (None, ["batch"]),
            "controlnet_cond": (None, latent),
            "conditioning_scale": (None, []),
        }
        outputs = {
            f"controlnet_block_samples.{i}": ["batch", "image_tokens", c.inner_dim]
            for i in range(c.num_layers)
        }
        return {"model": GraphSpec(inputs, outputs, lambda op, **values: self(op, **values))}


MODEL_TYPES = {"SanaControlNetModel": SanaControlNetModel}
