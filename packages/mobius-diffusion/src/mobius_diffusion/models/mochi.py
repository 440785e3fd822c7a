"""Mochi 1's transformer: asymmetric joint attention of video patches and T5 caption tokens.

The video stream is ``num_attention_heads * attention_head_dim`` wide, the caption
stream ``pooled_projection_dim`` wide (``caption_proj`` of the T5 states); each
block's attention projects both to the heads and attends over [video, caption],
the caption's padding masked as keys. Every block modulates both streams from
``temb`` (the timestep embedding plus ``pooler``: attention of the masked mean of
the T5 states over them): RMS norms without weights, scaled by ``1 + scale``, and
residuals gated by ``tanh`` of the gates, RMS-normed again. The last block
(``context_pre_only``) leaves the caption as it is.

Positions are a learned 3-D RoPE: patch ``(t, r, c)`` sits at ``(t, y, x)``, the
rows and columns being the centres of a grid spread over a 192 x 192 area
whatever the latent's size; ``pos_frequencies`` [3, heads, head_dim/2] turns
them into angles, one set per head (adjacent channel pairs rotate together).

diffusers drops each row's padded caption tokens from its attention and zero-pads
the result; masking them as keys gives the video and the real tokens the same
values for the caption masks a tokenizer makes (real tokens first). The padded
tokens' own states differ, and nothing reads them.

Graph (:class:`mobius.tasks.DenoisingTask`): ``hidden_states`` [batch, channels,
frames, latent_height, latent_width], ``encoder_hidden_states`` [batch, sequence,
text_embed_dim], ``timestep`` [batch] (the scheduler's, in [0, 1000]),
``encoder_attention_mask`` int64 [batch, sequence] -> ``out_hidden_states``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv2d, Linear, RMSNorm, WeightlessRMSNorm
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._attention import FeedForward
from mobius_diffusion.models._checks import config_choice, config_int
from mobius_diffusion.models._dit_blocks import AdaLayerNormContinuous, _ints, per_token
from mobius_diffusion.models._embeddings import TimestepEmbedding, Timesteps
from mobius_diffusion.models.pixart import caption_bias
from mobius_diffusion.tasks import GraphSpec

EPS = 1e-6  # diffusers fixes the blocks' norms' epsilon
QK_NORM_EPS = 1e-5  # and the per-head query and key norms'
POOL_HEADS = 8  # the caption pooler's heads (fixed in diffusers)
ROPE_AREA = 192 * 192  # MochiRoPE's base_height * base_width: the area the grid spreads over


@dataclass
class MochiConfig:
    patch_size: int = 2
    num_attention_heads: int = 24
    attention_head_dim: int = 128
    num_layers: int = 48
    pooled_projection_dim: int = 1536
    in_channels: int = 12
    out_channels: int = 12
    text_embed_dim: int = 4096
    time_embed_dim: int = 256

    @classmethod
    def from_hf(cls, config: Any) -> MochiConfig:
        name = config.model_type
        # diffusers builds these two whatever they say; another value is refused, not believed
        config_choice(config, "qk_norm", "rms_norm", ("rms_norm",))
        config_choice(config, "activation_fn", "swiglu", ("swiglu",))
        c = cls(
            **{
                key: config_int(config, key, getattr(cls, key))
                for key in cls.__dataclass_fields__
                if key != "out_channels"
            },
        )
        c.out_channels = c.in_channels  # diffusers' ``out_channels or in_channels``
        if getattr(config, "out_channels", None) is not None:
            c.out_channels = config_int(config, "out_channels")
        if c.attention_head_dim % 2:
            raise ConfigError(f"{name} attention_head_dim {c.attention_head_dim} must be even")
        if c.text_embed_dim % POOL_HEADS:
            raise ConfigError(
                f"{name} text_embed_dim {c.text_embed_dim} must split into the pooler's "
                f"{POOL_HEADS} heads"
            )
        return c

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim


def rotate(op, x, rotary, heads: int):
    """Adjacent channel pairs of ``x [b, tokens, heads*head_dim]`` rotated by ``rotary``'s
    ``(cos, sin)`` ``[tokens, heads, head_dim/2, 1]`` (an angle per head)."""
    cos, sin = rotary
    pairs = op.Reshape(x, _ints(op, [0, 0, heads, -1, 2]))
    even, odd = op.Split(pairs, axis=-1, num_outputs=2, _outputs=2)
    out = op.Concat(
        op.Sub(op.Mul(even, cos), op.Mul(odd, sin)),
        op.Add(op.Mul(even, sin), op.Mul(odd, cos)),
        axis=-1,
    )
    return op.Reshape(out, _ints(op, [0, 0, -1]))


class MochiAttentionPool(nn.Module):
    """The masked mean of the caption as a query over ``[mean, caption]`` (padding masked)."""

    def __init__(self, dim: int, out_dim: int) -> None:
        super().__init__()
        self.dim = dim
        self.to_kv = Linear(dim, 2 * dim, bias=True)
        self.to_q = Linear(dim, dim, bias=True)
        self.to_out = Linear(dim, out_dim, bias=True)

    def forward(self, op, x, mask):
        keep = op.Unsqueeze(op.CastLike(mask, x), _ints(op, [2]))  # [b, L, 1]
        count = op.Max(op.ReduceSum(keep, _ints(op, [1]), keepdims=1), 1.0)
        mean = op.ReduceSum(op.Mul(x, op.Div(keep, count)), _ints(op, [1]), keepdims=1)
        k, v = op.Split(
            self.to_kv(op, op.Concat(mean, x, axis=1)), axis=-1, num_outputs=2, _outputs=2
        )  # [b, 1 + L, dim] each
        first = op.Expand(op.Constant(value_ints=[1]), op.Shape(mask, start=0, end=1))
        keys = op.Concat(op.Unsqueeze(first, _ints(op, [1])), mask, axis=1)
        out = op.Attention(
            self.to_q(op, mean),
            k,
            v,
            caption_bias(op, keys, mean),
            q_num_heads=POOL_HEADS,
            kv_num_heads=POOL_HEADS,
            scale=(self.dim // POOL_HEADS) ** -0.5,
        )  # [b, 1, dim]
        return op.Squeeze(self.to_out(op, out), _ints(op, [1]))


class MochiCombinedTimestepCaptionEmbedding(nn.Module):
    """``temb`` (the timestep's embedding plus the pooled caption) and the projected caption."""

    def __init__(self, c: MochiConfig) -> None:
        super().__init__()
        self.time_proj = Timesteps(c.time_embed_dim, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.timestep_embedder = TimestepEmbedding(c.time_embed_dim, c.inner_dim)
        self.pooler = MochiAttentionPool(c.text_embed_dim, c.inner_dim)
        self.caption_proj = Linear(c.text_embed_dim, c.pooled_projection_dim, bias=True)

    def forward(self, op, timestep, caption, mask):
        temb = self.timestep_embedder(op, self.time_proj(op, timestep, caption))
        return op.Add(temb, self.pooler(op, caption, mask)), self.caption_proj(op, caption)


class MochiRMSNormZero(nn.Module):
    """``linear(silu(temb))`` in (scale_msa, gate_msa, scale_mlp, gate_mlp); ``rms(x)`` times
    ``1 + scale_msa``."""

    def __init__(self, cond_dim: int, dim: int) -> None:
        super().__init__()
        self.linear = Linear(cond_dim, 4 * dim, bias=True)
        self.norm = WeightlessRMSNorm(dim, EPS)

    def forward(self, op, x, temb):
        emb = self.linear(op, op.Mul(temb, op.Sigmoid(temb)))
        scale, gate_msa, scale_mlp, gate_mlp = op.Split(emb, axis=1, num_outputs=4, _outputs=4)
        return op.Mul(self.norm(op, x), op.Add(per_token(op, scale), 1.0)), (
            gate_msa,
            scale_mlp,
            gate_mlp,
        )


class MochiLayerNormContinuous(nn.Module):
    """The last block's caption norm: ``rms(x) * (1 + linear_1(silu(temb)))``."""

    def __init__(self, dim: int, cond_dim: int) -> None:
        super().__init__()
        self.linear_1 = Linear(cond_dim, dim, bias=True)
        self.norm = WeightlessRMSNorm(dim, EPS)

    def forward(self, op, x, temb):
        scale = self.linear_1(op, op.Mul(temb, op.Sigmoid(temb)))
        return op.Mul(self.norm(op, x), op.Add(per_token(op, scale), 1.0))


class MochiAttention(nn.Module):
    """Video (``to_*``) and caption (``add_*_proj``) projected to the same heads, per-head RMS
    norms (the video's queries and keys then rotated), one attention over [video, caption].

    Returns ``(video out, caption out)``; the caption out is ``None`` for ``context_pre_only``.
    """

    def __init__(self, dim: int, heads: int, context_dim: int, context_pre_only: bool) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.to_q, self.to_k, self.to_v = (Linear(dim, dim, bias=False) for _ in "qkv")
        self.add_q_proj, self.add_k_proj, self.add_v_proj = (
            Linear(context_dim, dim, bias=False) for _ in "qkv"
        )
        self.norm_q, self.norm_k, self.norm_added_q, self.norm_added_k = (
            RMSNorm(self.head_dim, QK_NORM_EPS) for _ in range(4)
        )
        self.to_out = nn.ModuleList([Linear(dim, dim, bias=True)])
        self.to_add_out = None if context_pre_only else Linear(dim, context_dim, bias=True)

    def head_norm(self, op, norm, x):
        heads = op.Reshape(x, _ints(op, [0, 0, self.heads, self.head_dim]))
        return op.Reshape(norm(op, heads), _ints(op, [0, 0, -1]))

    def forward(self, op, x, context, rotary, bias):
        q = rotate(op, self.head_norm(op, self.norm_q, self.to_q(op, x)), rotary, self.heads)
        k = rotate(op, self.head_norm(op, self.norm_k, self.to_k(op, x)), rotary, self.heads)
        q = op.Concat(
            q, self.head_norm(op, self.norm_added_q, self.add_q_proj(op, context)), axis=1
        )
        k = op.Concat(
            k, self.head_norm(op, self.norm_added_k, self.add_k_proj(op, context)), axis=1
        )
        v = op.Concat(self.to_v(op, x), self.add_v_proj(op, context), axis=1)
        out = op.Attention(
            q,
            k,
            v,
            bias,
            q_num_heads=self.heads,
            kv_num_heads=self.heads,
            scale=self.head_dim**-0.5,
        )
        video = op.Shape(x, start=1, end=2)
        video_out, context_out = op.Split(
            out, op.Concat(video, op.Shape(context, start=1, end=2), axis=0), axis=1, _outputs=2
        )
        context_out = None if self.to_add_out is None else self.to_add_out(op, context_out)
        return self.to_out[0](op, video_out), context_out


class MochiTransformerBlock(nn.Module):
    """Both streams modulated around the joint attention and their own SwiGLU feed-forwards."""

    def __init__(self, c: MochiConfig, context_pre_only: bool) -> None:
        super().__init__()
        dim, context = c.inner_dim, c.pooled_projection_dim
        self.context_pre_only = context_pre_only
        self.norm1 = MochiRMSNormZero(dim, dim)
        self.norm1_context = (
            MochiLayerNormContinuous(context, dim)
            if context_pre_only
            else MochiRMSNormZero(dim, context)
        )
        self.attn1 = MochiAttention(dim, c.num_attention_heads, context, context_pre_only)
        self.ff = FeedForward(dim, inner_dim=4 * dim * 2 // 3, activation_fn="swiglu", bias=False)
        self.ff_context = None
        if not context_pre_only:
            inner = 4 * context * 2 // 3
            self.ff_context = FeedForward(
                context, inner_dim=inner, activation_fn="swiglu", bias=False
            )
        # diffusers' norm2-4 (and _context): weightless RMS norms times a scale or a gate
        self.rms, self.rms_context = WeightlessRMSNorm(dim, EPS), WeightlessRMSNorm(context, EPS)

    def stream(self, op, rms, ff, x, attn, gate_msa, scale_mlp, gate_mlp):
        """``x`` plus the gated attention, then plus the gated feed-forward of the scaled norm."""
        x = op.Add(x, op.Mul(rms(op, attn), per_token(op, op.Tanh(gate_msa))))
        scaled = op.Mul(rms(op, x), op.Add(per_token(op, scale_mlp), 1.0))
        return op.Add(x, op.Mul(rms(op, ff(op, scaled)), per_token(op, op.Tanh(gate_mlp))))

    def forward(self, op, x, context, temb, rotary, bias):
        normed, gates = self.norm1(op, x, temb)
        if self.context_pre_only:
            attn, _ = self.attn1(op, normed, self.norm1_context(op, context, temb), rotary, bias)
            return self.stream(op, self.rms, self.ff, x, attn, *gates), context
        context_normed, context_gates = self.norm1_context(op, context, temb)
        attn, context_attn = self.attn1(op, normed, context_normed, rotary, bias)
        x = self.stream(op, self.rms, self.ff, x, attn, *gates)
        context = self.stream(
            op, self.rms_context, self.ff_context, context, context_attn, *context_gates
        )
        return x, context


class MochiPatchEmbed(nn.Module):
    """diffusers' ``PatchEmbed`` without positions: a strided conv (``proj``) over each frame."""

    def __init__(self, patch_size: int, in_channels: int, dim: int) -> None:
        super().__init__()
        self.proj = Conv2d(in_channels, dim, patch_size, stride=patch_size)
        self.in_channels, self.dim = in_channels, dim

    def forward(self, op, video):
        """``[b, C, F, H, W]`` -> ``(tokens [b, F*h*w, dim], grid int64 [3]: F, h, w)``."""
        frames = op.Transpose(video, perm=[0, 2, 1, 3, 4])  # [b, F, C, H, W]
        shape = op.Concat(_ints(op, [-1, self.in_channels]), op.Shape(video, start=3), axis=0)
        x = self.proj(op, op.Reshape(frames, shape))  # [b*F, dim, h, w]
        grid = op.Concat(op.Shape(video, start=2, end=3), op.Shape(x, start=2), axis=0)
        x = op.Transpose(op.Reshape(x, _ints(op, [0, self.dim, -1])), perm=[0, 2, 1])
        rows = op.Concat(op.Shape(video, start=0, end=1), _ints(op, [-1, self.dim]), axis=0)
        return op.Reshape(x, rows), grid


def joint_bias(op, keys, like):
    """``keys`` (1: attend, 0: padding) ``[b, tokens]`` as the additive bias ``[b, 1, tokens,
    tokens]`` of every token of the joint sequence (as :func:`caption_bias`)."""
    bias = op.Mul(op.Sub(1.0, op.Unsqueeze(op.CastLike(keys, like), _ints(op, [1, 2]))), -10000.0)
    return op.Expand(
        bias, op.Concat(_ints(op, [1, 1]), op.Shape(keys, start=1), _ints(op, [1]), axis=0)
    )


def rope_positions(op, grid):
    """float32 ``[F*h*w, 3]``: each patch's frame and the centres of its row and column on a
    grid spread over :data:`ROPE_AREA`, as diffusers' ``MochiRoPE._get_positions``."""
    sizes = [op.Slice(grid, _ints(op, [i]), _ints(op, [i + 1])) for i in range(3)]
    f, h, w = (op.Cast(s, to=ir.DataType.FLOAT) for s in sizes)
    scale = op.Sqrt(op.Div(op.Constant(value_floats=[float(ROPE_AREA)]), op.Mul(h, w)))
    zero, one = op.Constant(value_float=0.0), op.Constant(value_float=1.0)
    shape = op.Concat(*sizes, _ints(op, [1]), axis=0)
    axes = []
    for axis, n in enumerate((f, h, w)):
        steps = op.Range(zero, op.Squeeze(n), one)
        if axis:  # centres of n cells of width scale, from -n * scale / 2
            steps = op.Mul(op.Sub(op.Add(steps, 0.5), op.Div(n, 2.0)), scale)
        view = [1, 1, 1, 1]
        view[axis] = -1
        axes.append(op.Expand(op.Reshape(steps, _ints(op, view)), shape))
    return op.Reshape(op.Concat(*axes, axis=-1), _ints(op, [-1, 3]))


class MochiTransformer3DModel(Model):
    """diffusers' ``MochiTransformer3DModel``; see the module docstring for the graph."""

    config_class = MochiConfig
    task = "denoising"

    def __init__(self, config: MochiConfig) -> None:
        super().__init__()
        c = self.config = config
        dim = c.inner_dim
        self.patch_embed = MochiPatchEmbed(c.patch_size, c.in_channels, dim)
        self.time_embed = MochiCombinedTimestepCaptionEmbedding(c)
        self.pos_frequencies = nn.Parameter([3, c.num_attention_heads, c.attention_head_dim // 2])
        self.transformer_blocks = nn.ModuleList(
            [MochiTransformerBlock(c, i == c.num_layers - 1) for i in range(c.num_layers)]
        )
        self.norm_out = AdaLayerNormContinuous(dim)
        self.proj_out = Linear(dim, c.patch_size**2 * c.out_channels, bias=True)

    def rotary(self, op, grid, like):
        """``(cos, sin)`` ``[tokens, heads, head_dim/2, 1]`` of the patch grid, in float32."""
        heads, half = self.config.num_attention_heads, self.config.attention_head_dim // 2
        freqs = op.Reshape(op.Cast(self.pos_frequencies, to=ir.DataType.FLOAT), _ints(op, [3, -1]))
        angles = op.MatMul(rope_positions(op, grid), freqs)  # [tokens, heads * half]
        angles = op.Reshape(angles, _ints(op, [-1, heads, half, 1]))
        return op.CastLike(op.Cos(angles), like), op.CastLike(op.Sin(angles), like)

    def unpatchify(self, op, x, grid):
        """``[b, F*h*w, p*p*C]`` -> ``[b, C, F, h*p, w*p]``."""
        c, p = self.config, self.config.patch_size
        x = op.Reshape(
            x, op.Concat(_ints(op, [0]), grid, _ints(op, [p, p, c.out_channels]), axis=0)
        )
        x = op.Transpose(x, perm=[0, 6, 1, 2, 4, 3, 5])  # [b, C, F, h, p, w, p]
        sizes = op.Mul(grid, _ints(op, [1, p, p]))
        return op.Reshape(x, op.Concat(_ints(op, [0, c.out_channels]), sizes, axis=0))

    def forward(self, op, hidden_states, encoder_hidden_states, timestep, encoder_attention_mask):
        temb, context = self.time_embed(op, timestep, encoder_hidden_states, encoder_attention_mask)
        x, grid = self.patch_embed(op, hidden_states)
        rotary = self.rotary(op, grid, x)
        video_keys = op.Expand(
            op.Constant(value=ir.tensor(np.ones((1, 1), np.int64))), op.Shape(x, start=0, end=2)
        )
        bias = joint_bias(op, op.Concat(video_keys, encoder_attention_mask, axis=1), x)
        for block in self.transformer_blocks:
            x, context = block(op, x, context, temb, rotary, bias)
        x = self.proj_out(op, self.norm_out(op, x, temb))
        return self.unpatchify(op, x, grid)

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        video = ["batch", c.in_channels, "frames", "latent_height", "latent_width"]
        inputs = {
            "hidden_states": (None, video),
            "encoder_hidden_states": (None, ["batch", "sequence", c.text_embed_dim]),
            "timestep": (None, ["batch"]),
            "encoder_attention_mask": (ir.DataType.INT64, ["batch", "sequence"]),
        }
        outputs = {
            "out_hidden_states": [
                "batch",
                c.out_channels,
                "frames",
                "latent_height",
                "latent_width",
            ]
        }

        def forward(op, **values):
            return {"out_hidden_states": self(op, **values)}

        return {"model": GraphSpec(inputs, outputs, forward)}


MODEL_TYPES = {"MochiTransformer3DModel": MochiTransformer3DModel}
