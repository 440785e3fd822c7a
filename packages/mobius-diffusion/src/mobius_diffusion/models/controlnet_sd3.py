"""SD3 / SD3.5's ControlNet: the transformer's joint blocks, each one's image tokens a residual.

The latents are patch-embedded as the transformer does (``pos_embed``); the
condition latents go through a second patch embedding without positions
(``pos_embed_input``, ``extra_conditioning_channels`` more channels, for inpainting)
and are added. Every ``JointTransformerBlock`` (none of them ``context_pre_only``)
hands its image tokens to a linear (``controlnet_blocks.{i}``); the results, times
``conditioning_scale``, are what the transformer adds after its blocks. Module tree
and names follow diffusers' ``SD3ControlNetModel`` checkpoints.

Graph (:class:`mobius.tasks.ControlNetTask`): the transformer's inputs
(``hidden_states`` [batch, in_channels, latent_height, latent_width],
``encoder_hidden_states``, ``pooled_projections``, ``timestep``) plus
``controlnet_cond`` [batch, in_channels + extra_conditioning_channels, latent_height,
latent_width] (the VAE latents of the condition image) and ``conditioning_scale``
(a scalar) -> ``controlnet_block_samples.{i}`` [batch, image_tokens, inner_dim], one
per block. Not built (refused by name): SD3.5 large's ControlNets, which borrow the
transformer's ``pos_embed`` (``use_pos_embed`` false) and have no text stream
(``joint_attention_dim`` null).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Linear
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._checks import config_choice, config_int
from mobius_diffusion.models._dit_blocks import (
    CombinedTimestepTextProjEmbeddings,
    JointTransformerBlock,
    PatchEmbed,
)
from mobius_diffusion.models.sana import UnpositionedPatchEmbed
from mobius_diffusion.models.sd3 import CroppedPatchEmbed, DualAttentionJointBlock, SD3Config
from mobius_diffusion.tasks import GraphSpec


@dataclass
class SD3ControlNetConfig(SD3Config):
    extra_conditioning_channels: int = 0
    pos_embed_type: str | None = "sincos"

    @classmethod
    def from_hf(cls, config: Any) -> SD3ControlNetConfig:
        if getattr(config, "use_pos_embed", True) is not True:
            raise ConfigError(
                "SD3ControlNetModel use_pos_embed=false (the transformer's pos_embed, SD3.5 "
                "large's ControlNets) is not built by mobius"
            )
        if getattr(config, "joint_attention_dim", 4096) is None:
            raise ConfigError(
                "SD3ControlNetModel joint_attention_dim=null (single-stream blocks, no text) "
                "is not built by mobius"
            )
        base = SD3Config.from_hf(config)
        return cls(
            **vars(base),
            extra_conditioning_channels=config_int(config, "extra_conditioning_channels", 0, low=0),
            pos_embed_type=config_choice(config, "pos_embed_type", "sincos", (None, "sincos")),
        )


class SD3ControlNetModel(Model):
    """diffusers' ``SD3ControlNetModel`` (SD3 medium and SD3.5 medium ControlNets)."""

    config_class = SD3ControlNetConfig
    task = "controlnet"

    def __init__(self, config: SD3ControlNetConfig) -> None:
        super().__init__()
        self.config = config
        dim, p = config.inner_dim, config.patch_size
        heads, head_dim = config.num_attention_heads, config.attention_head_dim
        if config.pos_embed_type is None:
            self.pos_embed = UnpositionedPatchEmbed(p, config.in_channels, dim)
        elif config.pos_embed_max_size:
            self.pos_embed = CroppedPatchEmbed(
                p, config.in_channels, dim, config.pos_embed_max_size
            )
        else:  # no stored table: diffusers makes one for each size
            self.pos_embed = PatchEmbed(p, config.in_channels, dim, config.sample_size // p)
        self.time_text_embed = CombinedTimestepTextProjEmbeddings(dim, config.pooled_projection_dim)
        self.context_embedder = Linear(config.joint_attention_dim, dim, bias=True)
        qk_norm = config.qk_norm is not None
        self.transformer_blocks = nn.ModuleList(
            [
                (
                    DualAttentionJointBlock
                    if i in config.dual_attention_layers
                    else JointTransformerBlock
                )(dim, heads, head_dim, qk_norm)
                for i in range(config.num_layers)
            ]
        )
        self.controlnet_blocks = nn.ModuleList(
            [Linear(dim, dim, bias=True) for _ in range(config.num_layers)]
        )
        cond_channels = config.in_channels + config.extra_conditioning_channels
        self.pos_embed_input = UnpositionedPatchEmbed(p, cond_channels, dim)

    def forward(
        self,
        op,
        hidden_states,
        encoder_hidden_states,
        pooled_projections,
        timestep,
        controlnet_cond,
        conditioning_scale,
    ):
        hidden, _, _ = self.pos_embed(op, hidden_states)
        temb = self.time_text_embed(op, timestep, pooled_projections)
        context = self.context_embedder(op, encoder_hidden_states)
        hidden = op.Add(hidden, self.pos_embed_input(op, controlnet_cond)[0])
        outputs = {}
        for i, (block, out) in enumerate(
            zip(self.transformer_blocks, self.controlnet_blocks, strict=True)
        ):
            context, hidden = block(op, hidden, context, temb)
            outputs[f"controlnet_block_samples.{i}"] = op.Mul(out(op, hidden), conditioning_scale)
        return outputs

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        latent = ["batch", c.in_channels, "latent_height", "latent_width"]
        inputs = {
            "hidden_states": (None, latent),
            "encoder_hidden_states": (None, ["batch", "sequence", c.joint_attention_dim]),
            "pooled_projections": (None, ["batch", c.pooled_projection_dim]),
            "timestep": (None, ["batch"]),
            "controlnet_cond": (
                None,
                ["batch", c.in_channels + c.extra_conditioning_channels, *latent[2:]],
            ),
            "conditioning_scale": (None, []),
        }
        outputs = {
            f"controlnet_block_samples.{i}": ["batch", "image_tokens", c.inner_dim]
            for i in range(c.num_layers)
        }
        return {"model": GraphSpec(inputs, outputs, lambda op, **values: self(op, **values))}


MODEL_TYPES = {"SD3ControlNetModel": SD3ControlNetModel}
