"""PixArt-alpha / PixArt-sigma: a text-conditional DiT with one shared adaptive norm (adaLN-single).

The timestep (and, for PixArt-alpha 1024, the image resolution and aspect ratio)
is embedded once and projected to six modulation vectors that every block adds
to its own learned ``scale_shift_table``; each block is self-attention,
cross-attention to the projected T5 caption (pad tokens masked as diffusers
does, by a -10000 bias) and an MLP. Module tree and names follow diffusers'
``PixArtTransformer2DModel`` checkpoints.
Graph: :class:`mobius.tasks.DenoisingTask`, ``hidden_states`` [batch, channels,
latent_height, latent_width], ``encoder_hidden_states``, ``encoder_attention_mask``
int64 [batch, sequence], ``timestep`` (and ``resolution`` [batch, 2],
``aspect_ratio`` [batch, 1]) -> ``out_hidden_states``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, bidirectional_attention
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._attention import Attention, FeedForward
from mobius_diffusion.models._dit_blocks import (
    PatchEmbed,
    TextProjection,
    WeightlessLayerNorm,
    layer_norm,
    unpatchify,
)
from mobius_diffusion.models._embeddings import TimestepEmbedding, Timesteps
from mobius_diffusion.tasks import GraphSpec


@dataclass
class PixArtConfig:
    num_attention_heads: int = 16
    attention_head_dim: int = 72
    in_channels: int = 4
    out_channels: int = 8
    num_layers: int = 28
    cross_attention_dim: int = 1152
    attention_bias: bool = True
    sample_size: int = 128
    patch_size: int = 2
    activation_fn: str = "gelu-approximate"
    norm_elementwise_affine: bool = False
    norm_eps: float = 1e-6
    interpolation_scale: float = 2.0
    use_additional_conditions: bool = True
    caption_channels: int | None = None

    @classmethod
    def from_hf(cls, config: Any) -> PixArtConfig:
        norm_type = getattr(config, "norm_type", "ada_norm_single")
        if norm_type != "ada_norm_single":
            raise ConfigError(f"PixArt norm_type {norm_type!r} is not built by mobius")
        if getattr(config, "attention_type", "default") not in (None, "default"):
            raise ConfigError(f"PixArt attention_type {config.attention_type!r} is not built")
        if getattr(config, "upcast_attention", False):
            raise ConfigError("PixArt upcast_attention (float32 attention scores) is not built")
        inner = config.num_attention_heads * config.attention_head_dim
        cross = getattr(config, "cross_attention_dim", 1152)
        if cross != inner:
            raise ConfigError(f"PixArt cross_attention_dim {cross} must be the width {inner}")
        sample = config.sample_size
        extra = getattr(config, "use_additional_conditions", None)
        extra = sample == 128 if extra is None else bool(extra)  # diffusers' default
        if extra and inner % 3:
            raise ConfigError(f"PixArt size conditioning needs a width divisible by 3, not {inner}")
        scale = getattr(config, "interpolation_scale", None)
        return cls(
            num_attention_heads=config.num_attention_heads,
            attention_head_dim=config.attention_head_dim,
            in_channels=config.in_channels,
            out_channels=getattr(config, "out_channels", 8) or config.in_channels,
            num_layers=config.num_layers,
            cross_attention_dim=cross,
            attention_bias=getattr(config, "attention_bias", True),
            sample_size=sample,
            patch_size=config.patch_size,
            activation_fn=getattr(config, "activation_fn", "gelu-approximate"),
            norm_elementwise_affine=getattr(config, "norm_elementwise_affine", False),
            norm_eps=getattr(config, "norm_eps", 1e-6),
            interpolation_scale=scale if scale is not None else max(sample // 64, 1),
            use_additional_conditions=extra,
            caption_channels=getattr(config, "caption_channels", None),
        )

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim


class PixArtAlphaCombinedTimestepSizeEmbeddings(nn.Module):
    """The timestep embedding, plus (optionally) resolution and aspect-ratio embeddings of ``dim/3`` each."""

    def __init__(self, dim: int, use_additional_conditions: bool) -> None:
        super().__init__()
        self.time_proj = Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.timestep_embedder = TimestepEmbedding(256, dim)
        self.resolution_embedder = self.aspect_ratio_embedder = None
        if use_additional_conditions:
            self.resolution_embedder = TimestepEmbedding(256, dim // 3)
            self.aspect_ratio_embedder = TimestepEmbedding(256, dim // 3)

    def size_embedding(self, op, embedder, values, like):
        """``values [batch, n]`` -> ``[batch, n * dim/3]``, each number embedded as a timestep."""
        flat = op.Reshape(values, op.Constant(value_ints=[-1]))
        emb = embedder(op, self.time_proj(op, flat, like))
        return op.Reshape(emb, op.Concat(op.Shape(values, start=0, end=1), [-1], axis=0))

    def forward(self, op, timestep, like, resolution=None, aspect_ratio=None):
        emb = self.timestep_embedder(op, self.time_proj(op, timestep, like))
        if self.resolution_embedder is None:
            return emb
        sizes = op.Concat(
            self.size_embedding(op, self.resolution_embedder, resolution, like),
            self.size_embedding(op, self.aspect_ratio_embedder, aspect_ratio, like),
            axis=1,
        )
        return op.Add(emb, sizes)


class AdaLayerNormSingle(nn.Module):
    """-> ``(linear(silu(emb)) [batch, 6*dim], emb [batch, dim])``: the blocks' and the output's conditioning."""

    def __init__(self, dim: int, use_additional_conditions: bool) -> None:
        super().__init__()
        self.emb = PixArtAlphaCombinedTimestepSizeEmbeddings(dim, use_additional_conditions)
        self.linear = Linear(dim, 6 * dim, bias=True)

    def forward(self, op, timestep, like, resolution=None, aspect_ratio=None):
        emb = self.emb(op, timestep, like, resolution, aspect_ratio)
        return self.linear(op, op.Mul(emb, op.Sigmoid(emb))), emb


class MaskedCrossAttention(Attention):
    """Cross-attention with an additive bias on the keys (the caption's padding)."""

    def forward(self, op, hidden, context, bias):
        q, k, v = self.to_q(op, hidden), self.to_k(op, context), self.to_v(op, context)
        out = bidirectional_attention(op, q, k, v, bias, self.heads, self.dim_head**-0.5)
        return self.to_out[0](op, out)


def caption_bias(op, encoder_attention_mask, hidden):
    """The caption's padding: an additive bias ``[batch, 1, queries, keys]``, ``hidden``'s dtype.

    diffusers' ``(1 - mask) * -10000`` on the keys, spelled out per query for ONNX Runtime.
    """
    keep = op.CastLike(encoder_attention_mask, hidden)
    bias = op.Mul(op.Sub(1.0, op.Unsqueeze(keep, [1, 2])), -10000.0)  # [b, 1, 1, keys]
    queries = op.Shape(hidden, start=1, end=2)
    return op.Expand(bias, op.Concat([1, 1], queries, [1], axis=0))


def table_modulation(op, table, emb):
    """``table [6, dim] + emb [batch, 6*dim]`` as ``[batch, 6, dim]``, split in six ``[batch, 1, dim]``."""
    emb = op.Reshape(emb, op.Constant(value_ints=[0, 6, -1]))
    return op.Split(op.Add(table, emb), axis=1, num_outputs=6, _outputs=6)


class PixArtBlock(nn.Module):
    """diffusers' ``BasicTransformerBlock`` as PixArt configures it (``ada_norm_single``, cross-attention)."""

    def __init__(self, config: PixArtConfig) -> None:
        super().__init__()
        dim, heads, head_dim = (
            config.inner_dim,
            config.num_attention_heads,
            config.attention_head_dim,
        )
        self.norm1 = layer_norm(dim, config.norm_eps, config.norm_elementwise_affine)
        self.attn1 = Attention(dim, heads, head_dim, bias=config.attention_bias)
        self.attn2 = MaskedCrossAttention(dim, heads, head_dim, dim, bias=config.attention_bias)
        self.norm2 = layer_norm(dim, config.norm_eps, config.norm_elementwise_affine)
        self.ff = FeedForward(dim, activation_fn=config.activation_fn)
        self.scale_shift_table = nn.Parameter([6, dim])

    def forward(self, op, x, context, bias, timestep_emb):
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = table_modulation(
            op, self.scale_shift_table, timestep_emb
        )
        normed = op.Add(op.Mul(self.norm1(op, x), op.Add(scale_msa, 1.0)), shift_msa)
        x = op.Add(x, op.Mul(gate_msa, self.attn1(op, normed)))
        x = op.Add(x, self.attn2(op, x, context, bias))  # no norm before cross-attention
        normed = op.Add(op.Mul(self.norm2(op, x), op.Add(scale_mlp, 1.0)), shift_mlp)
        return op.Add(x, op.Mul(gate_mlp, self.ff(op, normed)))


class PixArtTransformer2DModel(Model):
    """diffusers' ``PixArtTransformer2DModel`` (PixArt-alpha 256 / 512 / 1024, PixArt-sigma)."""

    config_class = PixArtConfig
    task = "denoising"

    def __init__(self, config: PixArtConfig) -> None:
        super().__init__()
        self.config = config
        dim, p = config.inner_dim, config.patch_size
        base = config.sample_size // p
        self.pos_embed = PatchEmbed(p, config.in_channels, dim, base, config.interpolation_scale)
        self.transformer_blocks = nn.ModuleList(
            [PixArtBlock(config) for _ in range(config.num_layers)]
        )
        self.norm_out = WeightlessLayerNorm(dim, 1e-6)
        self.scale_shift_table = nn.Parameter([2, dim])
        self.proj_out = Linear(dim, p * p * config.out_channels, bias=True)
        self.adaln_single = AdaLayerNormSingle(dim, config.use_additional_conditions)
        self.caption_projection = None
        if config.caption_channels is not None:
            self.caption_projection = TextProjection(config.caption_channels, dim)

    def forward(
        self,
        op,
        hidden_states,
        encoder_hidden_states,
        encoder_attention_mask,
        timestep,
        resolution=None,
        aspect_ratio=None,
    ):
        hidden, h, w = self.pos_embed(op, hidden_states)
        block_emb, emb = self.adaln_single(op, timestep, hidden, resolution, aspect_ratio)
        context = encoder_hidden_states
        if self.caption_projection is not None:
            context = self.caption_projection(op, context)
        bias = caption_bias(op, encoder_attention_mask, hidden)
        for block in self.transformer_blocks:
            hidden = block(op, hidden, context, bias, block_emb)
        # The output's table takes the embedding itself, broadcast, not projected.
        table = op.Add(self.scale_shift_table, op.Unsqueeze(emb, [1]))  # [b, 2, dim]
        shift, scale = op.Split(table, axis=1, num_outputs=2, _outputs=2)
        hidden = op.Add(op.Mul(self.norm_out(op, hidden), op.Add(scale, 1.0)), shift)
        hidden = self.proj_out(op, hidden)
        return unpatchify(op, hidden, h, w, self.config.patch_size, self.config.out_channels)

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        text_dim = c.caption_channels or c.cross_attention_dim
        inputs = {
            "hidden_states": (None, ["batch", c.in_channels, "latent_height", "latent_width"]),
            "encoder_hidden_states": (None, ["batch", "sequence", text_dim]),
            "encoder_attention_mask": (ir.DataType.INT64, ["batch", "sequence"]),
            "timestep": (None, ["batch"]),
        }
        if c.use_additional_conditions:
            inputs["resolution"] = (None, ["batch", 2])
            inputs["aspect_ratio"] = (None, ["batch", 1])
        outputs = {"out_hidden_states": ["batch", c.out_channels, "latent_height", "latent_width"]}

        def forward(op, **values):
            return {"out_hidden_states": self(op, **values)}

        return {"model": GraphSpec(inputs, outputs, forward)}


MODEL_TYPES = {"PixArtTransformer2DModel": PixArtTransformer2DModel}
