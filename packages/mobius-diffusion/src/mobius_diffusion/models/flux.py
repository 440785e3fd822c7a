"""Flux's transformer: double-stream MMDiT blocks, then single-stream blocks over text + image.

Image tokens are packed latents (2x2 patches already folded into channels by the
pipeline). Text and image tokens carry 3-axis position ids; the rotary tables are
computed in the graph from them (``axes_dims_rope`` channels per axis, theta
10000). The conditioning ``temb`` sums the timestep, the pooled text projection
and, for guidance-distilled models, the guidance scale embedding. Module tree
and names follow diffusers' ``FluxTransformer2DModel`` checkpoints.
Graph: :class:`mobius.tasks.DenoisingTask`, ``hidden_states``,
``encoder_hidden_states``, ``pooled_projections``, ``timestep`` (the pipeline's
``t / 1000``), ``img_ids``, ``txt_ids`` (and ``guidance``) -> ``out_hidden_states``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Linear
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._dit_blocks import (
    AdaLayerNormContinuous,
    AdaLayerNormZeroSingle,
    AxesRotary,
    CombinedTimestepTextProjEmbeddings,
    JointTransformerBlock,
    QKNormAttention,
    gated,
)
from mobius_diffusion.models._embeddings import TimestepEmbedding
from mobius_diffusion.tasks import GraphSpec


def rope_axes(config: Any) -> tuple[int, ...]:
    """``axes_dims_rope``: even channel counts that share out ``attention_head_dim``."""
    axes = tuple(getattr(config, "axes_dims_rope", (16, 56, 56)))
    if sum(axes) != config.attention_head_dim or any(d % 2 for d in axes):
        raise ConfigError(
            f"{config.model_type} axes_dims_rope {axes} must be even and sum to "
            f"attention_head_dim {config.attention_head_dim}"
        )
    return axes


def joint_rotary(op, pos_embed: AxesRotary, hidden, txt_ids, img_ids):
    """``(cos, sin)`` ``[batch, text + image tokens, head_dim/2]`` in ``hidden``'s dtype."""
    cos, sin = pos_embed(op, op.Concat(txt_ids, img_ids, axis=0))
    rows = op.Concat(op.Shape(hidden, start=0, end=1), op.Shape(cos), axis=0)
    return op.Expand(op.CastLike(cos, hidden), rows), op.Expand(op.CastLike(sin, hidden), rows)


def image_tokens(op, joint, context):
    """The image part of the joint ``[text, image]`` sequence."""
    return op.Slice(joint, op.Shape(context, start=1, end=2), op.Shape(joint, start=1, end=2), [1])


@dataclass
class FluxConfig:
    patch_size: int = 1
    in_channels: int = 64
    out_channels: int | None = None
    num_layers: int = 19
    num_single_layers: int = 38
    attention_head_dim: int = 128
    num_attention_heads: int = 24
    joint_attention_dim: int = 4096
    pooled_projection_dim: int = 768
    guidance_embeds: bool = False
    axes_dims_rope: tuple[int, ...] = (16, 56, 56)

    @classmethod
    def from_hf(cls, config: Any) -> FluxConfig:
        axes = rope_axes(config)
        return cls(
            patch_size=getattr(config, "patch_size", 1),
            in_channels=config.in_channels,
            out_channels=getattr(config, "out_channels", None),
            num_layers=config.num_layers,
            num_single_layers=config.num_single_layers,
            attention_head_dim=config.attention_head_dim,
            num_attention_heads=config.num_attention_heads,
            joint_attention_dim=config.joint_attention_dim,
            pooled_projection_dim=config.pooled_projection_dim,
            guidance_embeds=bool(getattr(config, "guidance_embeds", False)),
            axes_dims_rope=axes,
        )

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim


class CombinedTimestepGuidanceTextProjEmbeddings(CombinedTimestepTextProjEmbeddings):
    """The timestep embedding plus a guidance-scale embedding (same sinusoid) plus the pooled text."""

    def __init__(self, dim: int, pooled_projection_dim: int) -> None:
        super().__init__(dim, pooled_projection_dim)
        self.guidance_embedder = TimestepEmbedding(256, dim)

    def forward(self, op, timestep, pooled, guidance):
        g_emb = self.guidance_embedder(op, self.time_proj(op, guidance, pooled))
        return op.Add(super().forward(op, timestep, pooled), g_emb)


class FluxSingleTransformerBlock(nn.Module):
    """Attention and MLP side by side on the joint sequence, one output projection, one gate."""

    def __init__(self, dim: int, heads: int, dim_head: int, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        mlp = int(dim * mlp_ratio)
        self.norm = AdaLayerNormZeroSingle(dim)
        self.proj_mlp = Linear(dim, mlp, bias=True)
        self.proj_out = Linear(dim + mlp, dim, bias=True)
        self.attn = QKNormAttention(dim, heads, dim_head, qk_norm=True, pre_only=True)

    def forward(self, op, x, temb, rotary):
        normed, gate = self.norm(op, x, temb)
        mlp = op.Gelu(self.proj_mlp(op, normed), approximate="tanh")
        both = op.Concat(self.attn(op, normed, rotary), mlp, axis=2)
        return op.Add(x, gated(op, gate, self.proj_out(op, both)))


class FluxTransformer2DModel(Model):
    """diffusers' ``FluxTransformer2DModel`` (Flux.1 dev / schnell and their tiny relatives)."""

    config_class = FluxConfig
    task = "denoising"

    def __init__(self, config: FluxConfig) -> None:
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
        self.norm_out = AdaLayerNormContinuous(dim)
        out_channels = config.out_channels or config.in_channels
        self.proj_out = Linear(dim, config.patch_size**2 * out_channels, bias=True)

    def forward(
        self,
        op,
        hidden_states,
        encoder_hidden_states,
        pooled_projections,
        timestep,
        img_ids,
        txt_ids,
        guidance=None,
    ):
        hidden = self.x_embedder(op, hidden_states)
        timestep = op.Mul(timestep, 1000.0)  # the pipeline passes t / 1000
        if guidance is None:
            temb = self.time_text_embed(op, timestep, pooled_projections)
        else:
            temb = self.time_text_embed(op, timestep, pooled_projections, op.Mul(guidance, 1000.0))
        context = self.context_embedder(op, encoder_hidden_states)
        rotary = joint_rotary(op, self.pos_embed, hidden, txt_ids, img_ids)
        for block in self.transformer_blocks:
            context, hidden = block(op, hidden, context, temb, rotary)
        # Each single block joins [text, image] and splits them again: join once instead.
        joint = op.Concat(context, hidden, axis=1)
        for block in self.single_transformer_blocks:
            joint = block(op, joint, temb, rotary)
        return self.proj_out(op, self.norm_out(op, image_tokens(op, joint, context), temb))

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        inputs = {
            "hidden_states": (None, ["batch", "image_tokens", c.in_channels]),
            "encoder_hidden_states": (None, ["batch", "sequence", c.joint_attention_dim]),
            "pooled_projections": (None, ["batch", c.pooled_projection_dim]),
            "timestep": (None, ["batch"]),
            "img_ids": (None, ["image_tokens", len(c.axes_dims_rope)]),
            "txt_ids": (None, ["sequence", len(c.axes_dims_rope)]),
        }
        if c.guidance_embeds:
            inputs["guidance"] = (None, ["batch"])
        out_channels = c.patch_size**2 * (c.out_channels or c.in_channels)
        outputs = {"out_hidden_states": ["batch", "image_tokens", out_channels]}

        def forward(op, **values):
            return {"out_hidden_states": self(op, **values)}

        return {"model": GraphSpec(inputs, outputs, forward)}


MODEL_TYPES = {"FluxTransformer2DModel": FluxTransformer2DModel}
