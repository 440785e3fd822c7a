"""Sana's transformer: a linear-attention DiT on the 32x-compressed latents of a DC-AE.

Each block is PixArt's (one shared adaLN-single modulation plus each block's
``scale_shift_table``, cross-attention to the caption with its padding masked),
with two changes: the self-attention is linear (ReLU feature maps on queries and
keys, no softmax: ``relu(q) (relu(k)^T v) / (relu(q) sum relu(k))``) and the MLP is
Mix-FFN (``GLUMBConv``: 1x1 conv, depthwise 3x3 conv, SiLU gate, 1x1 conv over the
token grid). The caption (Gemma-2 states) is projected, then RMS-normed. Sana-Sprint
adds a guidance embedding and RMS norms of queries and keys across heads.
Module tree and names follow diffusers' ``SanaTransformer2DModel`` checkpoints.
Graph: :class:`mobius.tasks.DenoisingTask`, ``hidden_states`` [batch, channels,
latent_height, latent_width], ``encoder_hidden_states`` [batch, sequence, caption
channels], ``encoder_attention_mask`` int64 [batch, sequence], ``timestep`` [batch]
(as the pipeline passes it: already times ``timestep_scale``), and for Sprint
``guidance`` [batch] (already times ``guidance_embeds_scale``) -> ``out_hidden_states``.

The ReLU linear attention and Mix-FFN are also the DC-AE's
(:mod:`mobius_diffusion.models.autoencoder_dc`), as in diffusers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv2d, Linear, RMSNorm, bidirectional_attention
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._attention import Attention
from mobius_diffusion.models._checks import config_choice, config_float, config_int
from mobius_diffusion.models._dit_blocks import (
    PatchEmbed,
    TextProjection,
    WeightlessLayerNorm,
    layer_norm,
    unpatchify,
)
from mobius_diffusion.models._embeddings import TimestepEmbedding, Timesteps
from mobius_diffusion.models.pixart import AdaLayerNormSingle, caption_bias, table_modulation
from mobius_diffusion.tasks import GraphSpec

#: diffusers' ``qk_norm`` values that mobius builds (``None``: no norm).
QK_NORMS = (None, "rms_norm_across_heads")
#: diffusers' linear attention adds it to the normaliser (``1e-15``, below float32's resolution
#: of any nonzero sum): it only keeps an all-zero row finite.
LINEAR_ATTENTION_EPS = 1e-15


def relu_linear_attention(op, q, k, v):
    """``[batch, heads, head_dim, tokens]`` each -> the same layout, computed in float32.

    ``relu(q)`` and ``relu(k)`` are the feature maps; a row of ones appended to ``v``
    makes the normaliser (``sum_j relu(k_j) . relu(q_i)``) the product's last row, as
    diffusers computes it: ``(v_pad relu(k)^T) relu(q)``, then all rows but the last
    over the last.
    """
    like = v
    q, k, v = (op.Cast(x, to=ir.DataType.FLOAT) for x in (q, k, v))
    q, k = op.Relu(q), op.Relu(k)
    padded = op.Pad(
        v, op.Constant(value_ints=[0, 0, 0, 0, 0, 0, 1, 0]), op.Constant(value_float=1.0)
    )
    scores = op.MatMul(padded, op.Transpose(k, perm=[0, 1, 3, 2]))  # [b, h, d + 1, d]
    out = op.MatMul(scores, q)  # [b, h, d + 1, tokens]
    values = op.Slice(out, [0], [-1], [2])
    normaliser = op.Slice(out, [-1], [2**62], [2])
    return op.CastLike(op.Div(values, op.Add(normaliser, LINEAR_ATTENTION_EPS)), like)


class ChannelRMSNorm(nn.Module):
    """diffusers' ``RMSNorm`` with ``weight`` and ``bias`` over the channels of ``[b, c, h, w]``.

    (diffusers moves the channels last and back; here the statistic runs on axis 1.)
    """

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter([channels])
        self.bias = nn.Parameter([channels])
        self.eps = eps

    def forward(self, op, x):
        x32 = op.Cast(x, to=ir.DataType.FLOAT)
        mean_square = op.ReduceMean(op.Mul(x32, x32), [1], keepdims=1)
        normed = op.CastLike(op.Div(x32, op.Sqrt(op.Add(mean_square, self.eps))), x)
        per_channel = op.Constant(value_ints=[-1, 1, 1])
        return op.Add(
            op.Mul(normed, op.Reshape(self.weight, per_channel)),
            op.Reshape(self.bias, per_channel),
        )


class GLUMBConv(nn.Module):
    """Mix-FFN over ``[b, c, h, w]``: ``conv_inverted`` (1x1) and SiLU, ``conv_depth`` (depthwise
    3x3), half times SiLU of the other half, ``conv_point`` (1x1); an optional channel RMS norm
    (``norm``) and residual (the DC-AE's)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        expand_ratio: float = 4,
        rms_norm: bool = False,
        residual_connection: bool = True,
    ) -> None:
        super().__init__()
        hidden = int(expand_ratio * in_channels)
        self.conv_inverted = Conv2d(in_channels, 2 * hidden, 1)
        self.conv_depth = Conv2d(2 * hidden, 2 * hidden, 3, padding=1, groups=2 * hidden)
        self.conv_point = Conv2d(hidden, out_channels, 1, bias=False)
        self.norm = ChannelRMSNorm(out_channels) if rms_norm else None
        self.residual_connection = residual_connection

    def forward(self, op, x):
        h = self.conv_inverted(op, x)
        h = self.conv_depth(op, op.Mul(h, op.Sigmoid(h)))
        h, gate = op.Split(h, axis=1, num_outputs=2, _outputs=2)
        h = self.conv_point(op, op.Mul(h, op.Mul(gate, op.Sigmoid(gate))))
        if self.norm is not None:
            h = self.norm(op, h)
        return op.Add(h, x) if self.residual_connection else h


@dataclass
class SanaConfig:
    in_channels: int = 32
    out_channels: int = 32
    num_attention_heads: int = 70
    attention_head_dim: int = 32
    num_layers: int = 20
    num_cross_attention_heads: int = 20
    cross_attention_head_dim: int = 112
    caption_channels: int = 2304
    mlp_ratio: float = 2.5
    attention_bias: bool = False
    sample_size: int = 32
    patch_size: int = 1
    norm_elementwise_affine: bool = False
    norm_eps: float = 1e-6
    interpolation_scale: float | None = None
    guidance_embeds: bool = False
    qk_norm: str | None = None

    @classmethod
    def from_hf(cls, config: Any) -> SanaConfig:
        heads = config_int(config, "num_attention_heads", 70)
        head_dim = config_int(config, "attention_head_dim", 32)
        cross_heads = config_int(config, "num_cross_attention_heads", 20)
        cross_head_dim = config_int(config, "cross_attention_head_dim", 112)
        inner = heads * head_dim
        cross = getattr(config, "cross_attention_dim", 2240)
        # The blocks attend to the caption projected to the width; diffusers' blocks
        # without cross-attention (``None``) do not run.
        if cross != inner:
            raise ConfigError(
                f"SanaTransformer2DModel cross_attention_dim {cross!r} must be the width {inner} "
                "(num_attention_heads x attention_head_dim)"
            )
        scale = getattr(config, "interpolation_scale", None)
        in_channels = config_int(config, "in_channels", 32)
        out_channels = in_channels  # diffusers' ``out_channels or in_channels``
        if getattr(config, "out_channels", None):
            out_channels = config_int(config, "out_channels")
        return cls(
            in_channels=in_channels,
            out_channels=out_channels,
            num_attention_heads=heads,
            attention_head_dim=head_dim,
            num_layers=config_int(config, "num_layers", 20),
            num_cross_attention_heads=cross_heads,
            cross_attention_head_dim=cross_head_dim,
            caption_channels=config_int(config, "caption_channels", 2304),
            mlp_ratio=config_float(config, "mlp_ratio", 2.5),
            attention_bias=bool(getattr(config, "attention_bias", False)),
            sample_size=config_int(config, "sample_size", 32),
            patch_size=config_int(config, "patch_size", 1),
            norm_elementwise_affine=bool(getattr(config, "norm_elementwise_affine", False)),
            norm_eps=config_float(config, "norm_eps", 1e-6),
            interpolation_scale=None
            if scale is None
            else config_float(config, "interpolation_scale"),
            guidance_embeds=bool(getattr(config, "guidance_embeds", False)),
            qk_norm=config_choice(config, "qk_norm", None, QK_NORMS),
        )

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim


def tokens_to_image(op, x, h, w):
    """``[b, h*w, c]`` -> ``[b, c, h, w]``."""
    grid = op.Reshape(x, op.Concat(op.Constant(value_ints=[0]), h, w, [-1], axis=0))
    return op.Transpose(grid, perm=[0, 3, 1, 2])


def image_to_tokens(op, x):
    """``[b, c, h, w]`` -> ``[b, h*w, c]``."""
    return op.Transpose(op.Reshape(x, op.Constant(value_ints=[0, 0, -1])), perm=[0, 2, 1])


class UnpositionedPatchEmbed(PatchEmbed):
    """``PatchEmbed`` with no position table: Sana without ``interpolation_scale``."""

    def forward(self, op, latent):
        h, w = self.grid_size(op, latent)
        return image_to_tokens(op, self.proj(op, latent)), h, w


class SanaCombinedTimestepGuidanceEmbeddings(nn.Module):
    """Sana-Sprint's conditioning: timestep plus guidance embeddings -> ``(linear(silu(e)), e)``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.time_proj = Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.timestep_embedder = TimestepEmbedding(256, dim)
        self.guidance_condition_proj = Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.guidance_embedder = TimestepEmbedding(256, dim)
        self.linear = Linear(dim, 6 * dim, bias=True)

    def forward(self, op, timestep, guidance, like):
        emb = op.Add(
            self.timestep_embedder(op, self.time_proj(op, timestep, like)),
            self.guidance_embedder(op, self.guidance_condition_proj(op, guidance, like)),
        )
        return self.linear(op, op.Mul(emb, op.Sigmoid(emb))), emb


class _SanaAttention(Attention):
    """``to_q``, ``to_k``, ``to_v``, ``to_out.0``; Sprint's RMS norms over all heads of q and k."""

    def __init__(self, dim, heads, dim_head, bias: bool, qk_norm: str | None) -> None:
        super().__init__(dim, heads, dim_head, bias=bias)
        inner = heads * dim_head
        self.norm_q = RMSNorm(inner, 1e-5) if qk_norm else None
        self.norm_k = RMSNorm(inner, 1e-5) if qk_norm else None

    def projections(self, op, hidden, context):
        q, k, v = self.to_q(op, hidden), self.to_k(op, context), self.to_v(op, context)
        if self.norm_q is not None:
            q, k = self.norm_q(op, q), self.norm_k(op, k)
        return q, k, v


class SanaLinearAttention(_SanaAttention):
    """Self-attention of ``[b, tokens, dim]`` with ReLU kernels (:func:`relu_linear_attention`)."""

    def forward(self, op, hidden):
        heads = op.Constant(value_ints=[0, self.heads, self.dim_head, -1])
        q, k, v = (
            op.Reshape(op.Transpose(x, perm=[0, 2, 1]), heads)  # [b, heads, head_dim, tokens]
            for x in self.projections(op, hidden, hidden)
        )
        out = relu_linear_attention(op, q, k, v)
        inner = op.Constant(value_ints=[0, self.heads * self.dim_head, -1])
        out = op.Transpose(op.Reshape(out, inner), perm=[0, 2, 1])
        return self.to_out[0](op, out)


class SanaCrossAttention(_SanaAttention):
    """Softmax attention to the caption, its padding an additive ``bias``."""

    def forward(self, op, hidden, context, bias):
        q, k, v = self.projections(op, hidden, context)
        out = bidirectional_attention(op, q, k, v, bias, self.heads, self.dim_head**-0.5)
        return self.to_out[0](op, out)


class SanaTransformerBlock(nn.Module):
    """Modulated linear self-attention, cross-attention to the caption, modulated Mix-FFN."""

    def __init__(self, config: SanaConfig) -> None:
        super().__init__()
        c, dim = config, config.inner_dim
        self.norm1 = WeightlessLayerNorm(dim, c.norm_eps)
        self.attn1 = SanaLinearAttention(
            dim, c.num_attention_heads, c.attention_head_dim, c.attention_bias, c.qk_norm
        )
        self.norm2 = layer_norm(dim, c.norm_eps, c.norm_elementwise_affine)
        self.attn2 = SanaCrossAttention(
            dim, c.num_cross_attention_heads, c.cross_attention_head_dim, True, c.qk_norm
        )
        self.ff = GLUMBConv(dim, dim, c.mlp_ratio, residual_connection=False)
        self.scale_shift_table = nn.Parameter([6, dim])

    def forward(self, op, x, context, bias, timestep_emb, h, w):
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = table_modulation(
            op, self.scale_shift_table, timestep_emb
        )
        normed = op.Add(op.Mul(self.norm1(op, x), op.Add(scale_msa, 1.0)), shift_msa)
        x = op.Add(x, op.Mul(gate_msa, self.attn1(op, normed)))
        x = op.Add(x, self.attn2(op, x, context, bias))  # no norm before cross-attention
        normed = op.Add(op.Mul(self.norm2(op, x), op.Add(scale_mlp, 1.0)), shift_mlp)
        ff = image_to_tokens(op, self.ff(op, tokens_to_image(op, normed, h, w)))
        return op.Add(x, op.Mul(gate_mlp, ff))


class SanaTransformer2DModel(Model):
    """diffusers' ``SanaTransformer2DModel`` (Sana 0.6B / 1.6B / 4.8B, Sana 1.5, Sana-Sprint)."""

    config_class = SanaConfig
    task = "denoising"

    def __init__(self, config: SanaConfig) -> None:
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
        if config.guidance_embeds:
            self.time_embed = SanaCombinedTimestepGuidanceEmbeddings(dim)
        else:
            self.time_embed = AdaLayerNormSingle(dim, use_additional_conditions=False)
        self.caption_projection = TextProjection(config.caption_channels, dim)
        self.caption_norm = RMSNorm(dim, 1e-5)
        self.transformer_blocks = nn.ModuleList(
            [SanaTransformerBlock(config) for _ in range(config.num_layers)]
        )
        self.scale_shift_table = nn.Parameter([2, dim])
        self.norm_out = WeightlessLayerNorm(dim, 1e-6)
        self.proj_out = Linear(dim, p * p * config.out_channels, bias=True)

    def forward(
        self,
        op,
        hidden_states,
        encoder_hidden_states,
        encoder_attention_mask,
        timestep,
        guidance=None,
    ):
        hidden, h, w = self.patch_embed(op, hidden_states)
        if self.config.guidance_embeds:
            block_emb, emb = self.time_embed(op, timestep, guidance, hidden)
        else:
            block_emb, emb = self.time_embed(op, timestep, hidden)
        context = self.caption_norm(op, self.caption_projection(op, encoder_hidden_states))
        bias = caption_bias(op, encoder_attention_mask, hidden)
        for block in self.transformer_blocks:
            hidden = block(op, hidden, context, bias, block_emb, h, w)
        # The output's table takes the embedding itself, broadcast, not projected.
        table = op.Add(self.scale_shift_table, op.Unsqueeze(emb, [1]))  # [b, 2, dim]
        shift, scale = op.Split(table, axis=1, num_outputs=2, _outputs=2)
        hidden = op.Add(op.Mul(self.norm_out(op, hidden), op.Add(scale, 1.0)), shift)
        hidden = self.proj_out(op, hidden)
        return unpatchify(op, hidden, h, w, self.config.patch_size, self.config.out_channels)

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        inputs = {
            "hidden_states": (None, ["batch", c.in_channels, "latent_height", "latent_width"]),
            "encoder_hidden_states": (None, ["batch", "sequence", c.caption_channels]),
            "encoder_attention_mask": (ir.DataType.INT64, ["batch", "sequence"]),
            "timestep": (None, ["batch"]),
        }
        if c.guidance_embeds:
            inputs["guidance"] = (None, ["batch"])
        outputs = {"out_hidden_states": ["batch", c.out_channels, "latent_height", "latent_width"]}

        def forward(op, **values):
            return {"out_hidden_states": self(op, **values)}

        return {"model": GraphSpec(inputs, outputs, forward)}


MODEL_TYPES = {"SanaTransformer2DModel": SanaTransformer2DModel}
