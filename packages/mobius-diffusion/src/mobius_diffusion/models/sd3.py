"""Stable Diffusion 3 / 3.5's MMDiT transformer: patchified latents and text in joint blocks.

The latent is cut into ``patch_size`` patches (a strided conv) and given the
centre crop of the checkpoint's ``pos_embed_max_size``-square sin-cos table
(``pos_embed.pos_embed``). Each ``JointTransformerBlock`` attends over image and
text tokens together; SD3.5 adds per-head RMSNorm of queries and keys
(``qk_norm="rms_norm"``) and, in its ``dual_attention_layers``, a second
image-only attention. The last block updates only the image tokens. Module tree
and names follow diffusers' ``SD3Transformer2DModel`` checkpoints.
Graph: :class:`mobius.tasks.DenoisingTask`, ``hidden_states`` [batch, channels,
latent_height, latent_width], ``encoder_hidden_states``, ``pooled_projections``,
``timestep`` -> ``out_hidden_states`` [batch, out_channels, latent_height, latent_width].
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
    CombinedTimestepTextProjEmbeddings,
    JointTransformerBlock,
    PatchEmbed,
    QKNormAttention,
    SD35AdaLayerNormZeroX,
    gated,
    unpatchify,
)
from mobius_diffusion.tasks import GraphSpec


@dataclass
class SD3Config:
    sample_size: int = 128
    patch_size: int = 2
    in_channels: int = 16
    num_layers: int = 18
    attention_head_dim: int = 64
    num_attention_heads: int = 18
    joint_attention_dim: int = 4096
    pooled_projection_dim: int = 2048
    out_channels: int = 16
    pos_embed_max_size: int | None = 96
    dual_attention_layers: tuple[int, ...] = ()
    qk_norm: str | None = None

    @classmethod
    def from_hf(cls, config: Any) -> SD3Config:
        qk_norm = getattr(config, "qk_norm", None)
        if qk_norm not in (None, "rms_norm"):
            raise ConfigError(f"SD3 qk_norm {qk_norm!r} is not built by mobius (None, 'rms_norm')")
        inner = config.num_attention_heads * config.attention_head_dim
        caption = getattr(config, "caption_projection_dim", inner)
        if caption != inner:
            raise ConfigError(
                f"SD3 caption_projection_dim {caption} must equal the attention width {inner}"
            )
        return cls(
            sample_size=config.sample_size,
            patch_size=config.patch_size,
            in_channels=config.in_channels,
            num_layers=config.num_layers,
            attention_head_dim=config.attention_head_dim,
            num_attention_heads=config.num_attention_heads,
            joint_attention_dim=config.joint_attention_dim,
            pooled_projection_dim=config.pooled_projection_dim,
            out_channels=getattr(config, "out_channels", None) or config.in_channels,
            pos_embed_max_size=getattr(config, "pos_embed_max_size", 96),
            dual_attention_layers=tuple(getattr(config, "dual_attention_layers", ())),
            qk_norm=qk_norm,
        )

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim


class CroppedPatchEmbed(PatchEmbed):
    """SD3's patch embedding: the position table is stored (``pos_embed``), cropped to the centre."""

    def __init__(self, patch_size: int, in_channels: int, dim: int, max_size: int) -> None:
        super().__init__(patch_size, in_channels, dim)
        self.max_size = max_size
        self.pos_embed = nn.Parameter([1, max_size * max_size, dim])

    def table(self, op, h, w):
        m = op.Constant(value_ints=[self.max_size])
        top, left = (op.Div(op.Sub(m, n), op.Constant(value_ints=[2])) for n in (h, w))
        grid = op.Reshape(
            self.pos_embed, op.Constant(value_ints=[self.max_size, self.max_size, -1])
        )
        starts = op.Concat(top, left, axis=0)
        crop = op.Slice(grid, starts, op.Add(starts, op.Concat(h, w, axis=0)), [0, 1])
        return op.Reshape(crop, op.Constant(value_ints=[1, -1, self.dim]))


class DualAttentionJointBlock(JointTransformerBlock):
    """SD3.5's block with a second, image-only attention (``attn2``) on its own modulation."""

    def __init__(self, dim, heads, dim_head, qk_norm: bool, context_pre_only: bool = False):
        super().__init__(dim, heads, dim_head, qk_norm, context_pre_only)
        self.attn2 = QKNormAttention(dim, heads, dim_head, qk_norm)

    def make_norm1(self, dim):
        return SD35AdaLayerNormZeroX(dim)

    def image_attention(self, op, hidden, norm1_out, context_normed, rotary):
        *first, normed2, gate2 = norm1_out
        hidden, mlp, context_attn = super().image_attention(
            op, hidden, first, context_normed, rotary
        )
        return op.Add(hidden, gated(op, gate2, self.attn2(op, normed2))), mlp, context_attn


class SD3Transformer2DModel(Model):
    """diffusers' ``SD3Transformer2DModel`` (SD3 medium, SD3.5 medium / large)."""

    config_class = SD3Config
    task = "denoising"

    def __init__(self, config: SD3Config) -> None:
        super().__init__()
        self.config = config
        dim, p = config.inner_dim, config.patch_size
        if config.pos_embed_max_size:
            self.pos_embed = CroppedPatchEmbed(
                p, config.in_channels, dim, config.pos_embed_max_size
            )
        else:  # no stored table: diffusers makes one for each size
            self.pos_embed = PatchEmbed(p, config.in_channels, dim, config.sample_size // p)
        self.time_text_embed = CombinedTimestepTextProjEmbeddings(dim, config.pooled_projection_dim)
        self.context_embedder = Linear(config.joint_attention_dim, dim, bias=True)
        qk_norm = config.qk_norm is not None
        blocks = []
        for i in range(config.num_layers):
            block = (
                DualAttentionJointBlock
                if i in config.dual_attention_layers
                else JointTransformerBlock
            )
            heads, head_dim = config.num_attention_heads, config.attention_head_dim
            blocks.append(block(dim, heads, head_dim, qk_norm, i == config.num_layers - 1))
        self.transformer_blocks = nn.ModuleList(blocks)
        self.norm_out = AdaLayerNormContinuous(dim)
        self.proj_out = Linear(dim, p * p * config.out_channels, bias=True)

    def forward(self, op, hidden_states, encoder_hidden_states, pooled_projections, timestep):
        hidden, h, w = self.pos_embed(op, hidden_states)
        temb = self.time_text_embed(op, timestep, pooled_projections)
        context = self.context_embedder(op, encoder_hidden_states)
        for block in self.transformer_blocks:
            context, hidden = block(op, hidden, context, temb)
        hidden = self.proj_out(op, self.norm_out(op, hidden, temb))
        return unpatchify(op, hidden, h, w, self.config.patch_size, self.config.out_channels)

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        inputs = {
            "hidden_states": (None, ["batch", c.in_channels, "latent_height", "latent_width"]),
            "encoder_hidden_states": (None, ["batch", "sequence", c.joint_attention_dim]),
            "pooled_projections": (None, ["batch", c.pooled_projection_dim]),
            "timestep": (None, ["batch"]),
        }
        outputs = {"out_hidden_states": ["batch", c.out_channels, "latent_height", "latent_width"]}

        def forward(op, **values):
            return {"out_hidden_states": self(op, **values)}

        return {"model": GraphSpec(inputs, outputs, forward)}


MODEL_TYPES = {"SD3Transformer2DModel": SD3Transformer2DModel}
