"""Blocks the diffusion transformers share (Flux, SD3, DiT, PixArt), in diffusers' layouts.

Patch embedding with its 2-D sin-cos position table, the adaptive layer norms
(``AdaLayerNormZero`` and its variants: a ``linear`` on ``silu(emb)`` split into
shifts, scales and gates), the pooled-text and timestep embedding, QK-normed and
joint (text + image) attention with optional rotary embeddings, the MMDiT block
and Flux's 3-axis RoPE. Token tensors are ``[batch, tokens, dim]``; conditioning
vectors (``temb``) are ``[batch, dim]``.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv2d, LayerNorm, Linear, RMSNorm, get_activation
from mobius_diffusion.models._attention import Attention, FeedForward
from mobius_diffusion.models._embeddings import TimestepEmbedding, Timesteps


def _ints(op, values):
    return op.Constant(value_ints=list(values))


def per_token(op, v):
    """``[batch, dim]`` -> ``[batch, 1, dim]``, to broadcast over tokens."""
    return op.Unsqueeze(v, _ints(op, [1]))


def modulate(op, x, shift, scale):
    """``x * (1 + scale) + shift``, ``shift``/``scale`` ``[batch, dim]`` over ``x [batch, tokens, dim]``."""
    return op.Add(op.Mul(x, op.Add(per_token(op, scale), 1.0)), per_token(op, shift))


def gated(op, gate, x):
    """``gate[:, None] * x``."""
    return op.Mul(per_token(op, gate), x)


class WeightlessLayerNorm(nn.Module):
    """``nn.LayerNorm(dim, elementwise_affine=False)``: no parameters."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, op, x):
        ones = op.CastLike(op.Constant(value=ir.tensor(np.ones(self.dim, np.float32))), x)
        return op.LayerNormalization(x, ones, axis=-1, epsilon=self.eps, stash_type=1)


def layer_norm(dim: int, eps: float, elementwise_affine: bool) -> nn.Module:
    """``nn.LayerNorm(dim, eps, elementwise_affine)``: with ``weight``/``bias`` or none."""
    return LayerNorm(dim, eps) if elementwise_affine else WeightlessLayerNorm(dim, eps)


class _AdaNorm(nn.Module):
    """``linear(silu(emb))`` split in ``chunks`` vectors, and a weightless LayerNorm ``norm``."""

    chunks = 6

    def __init__(self, dim: int, cond_dim: int | None = None, bias: bool = True, eps=1e-6):
        super().__init__()
        self.linear = Linear(cond_dim or dim, self.chunks * dim, bias=bias)
        self.norm = WeightlessLayerNorm(dim, eps)

    def modulation(self, op, emb) -> list:
        emb = self.linear(op, op.Mul(emb, op.Sigmoid(emb)))
        return op.Split(emb, axis=1, num_outputs=self.chunks, _outputs=self.chunks)


class AdaLayerNormZero(_AdaNorm):
    """-> ``(norm(x) modulated, gate_msa, shift_mlp, scale_mlp, gate_mlp)``."""

    def forward(self, op, x, emb):
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.modulation(op, emb)
        return (
            modulate(op, self.norm(op, x), shift_msa, scale_msa),
            gate_msa,
            shift_mlp,
            scale_mlp,
            gate_mlp,
        )


class AdaLayerNormZeroSingle(_AdaNorm):
    """-> ``(norm(x) modulated, gate)`` (Flux's single-stream blocks)."""

    chunks = 3

    def forward(self, op, x, emb):
        shift, scale, gate = self.modulation(op, emb)
        return modulate(op, self.norm(op, x), shift, scale), gate


class SD35AdaLayerNormZeroX(_AdaNorm):
    """AdaLayerNormZero plus a second modulation of the same norm for SD3.5's extra attention."""

    chunks = 9

    def forward(self, op, x, emb):
        shift, scale, gate, shift_mlp, scale_mlp, gate_mlp, shift2, scale2, gate2 = self.modulation(
            op, emb
        )
        normed = self.norm(op, x)
        first, second = modulate(op, normed, shift, scale), modulate(op, normed, shift2, scale2)
        return first, gate, shift_mlp, scale_mlp, gate_mlp, second, gate2


class AdaLayerNormContinuous(_AdaNorm):
    """``norm(x) * (1 + scale) + shift`` with ``scale, shift`` (that order) from the conditioning.

    Only the ``elementwise_affine=False`` LayerNorm form (what Flux and SD3 use).
    """

    chunks = 2

    def forward(self, op, x, emb):
        scale, shift = self.modulation(op, emb)
        return modulate(op, self.norm(op, x), shift, scale)


class TextProjection(nn.Module):
    """diffusers' ``PixArtAlphaTextProjection``: ``linear_1``, activation, ``linear_2``."""

    def __init__(
        self,
        in_features: int,
        hidden: int,
        act_fn: str = "gelu_tanh",
        out_features: int | None = None,
    ) -> None:
        super().__init__()
        self.linear_1 = Linear(in_features, hidden, bias=True)
        self.act = get_activation(act_fn)
        self.linear_2 = Linear(hidden, out_features or hidden, bias=True)

    def forward(self, op, x):
        return self.linear_2(op, self.act(op, self.linear_1(op, x)))


class CombinedTimestepTextProjEmbeddings(nn.Module):
    """Timestep embedding plus the projected pooled text embedding -> ``temb [batch, dim]``."""

    def __init__(self, dim: int, pooled_projection_dim: int) -> None:
        super().__init__()
        self.time_proj = Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.timestep_embedder = TimestepEmbedding(256, dim)
        self.text_embedder = TextProjection(pooled_projection_dim, dim, act_fn="silu")

    def forward(self, op, timestep, pooled):
        t_emb = self.timestep_embedder(op, self.time_proj(op, timestep, pooled))
        return op.Add(t_emb, self.text_embedder(op, pooled))


def sincos_1d(op, positions, dim: int):
    """diffusers' ``get_1d_sincos_pos_embed_from_grid``: float32 ``[n]`` -> ``[n, dim]`` (sin | cos)."""
    omega = 1.0 / 10000 ** (np.arange(dim // 2, dtype=np.float64) / (dim / 2.0))
    args = op.Mul(
        op.Unsqueeze(positions, _ints(op, [1])),
        op.Constant(value=ir.tensor(omega.astype(np.float32))),
    )
    return op.Concat(op.Sin(args), op.Cos(args), axis=1)


class PatchEmbed(nn.Module):
    """``proj`` (a patch-size-strided conv) to tokens, plus the 2-D sin-cos table made for the size.

    As diffusers' ``PatchEmbed`` without a stored table: the grid of an ``h x w``
    patch image runs ``arange(n) / (n / base_size) / interpolation_scale`` on each
    axis; the first half of each embedding encodes the column, the second the row.
    """

    def __init__(
        self,
        patch_size: int,
        in_channels: int,
        dim: int,
        base_size: int = 16,
        interpolation_scale: float = 1.0,
    ) -> None:
        super().__init__()
        self.patch_size, self.dim = patch_size, dim
        self.base_size, self.interpolation_scale = base_size, interpolation_scale
        self.proj = Conv2d(in_channels, dim, patch_size, stride=patch_size)

    def grid_size(self, op, latent):
        """``(h, w)`` int64 ``[1]`` each: the patch grid of ``latent [b, c, H, W]``."""
        p = _ints(op, [self.patch_size])
        return (op.Div(op.Shape(latent, start=i, end=i + 1), p) for i in (2, 3))

    def axis_positions(self, op, n):
        n_float = op.Cast(n, to=ir.DataType.FLOAT)
        steps = op.Range(
            op.Constant(value_float=0.0), op.Squeeze(n_float), op.Constant(value_float=1.0)
        )
        return op.Div(
            op.Div(steps, op.Div(n_float, float(self.base_size))), float(self.interpolation_scale)
        )

    def table(self, op, h, w):
        """``[1, h*w, dim]`` float32."""
        half = self.dim // 2
        rows = sincos_1d(op, self.axis_positions(op, h), half)  # [h, dim/2]
        cols = sincos_1d(op, self.axis_positions(op, w), half)  # [w, dim/2]
        shape = op.Concat(h, w, _ints(op, [half]), axis=0)
        grid = op.Concat(
            op.Expand(op.Unsqueeze(cols, _ints(op, [0])), shape),
            op.Expand(op.Unsqueeze(rows, _ints(op, [1])), shape),
            axis=-1,
        )  # [h, w, dim]
        return op.Reshape(grid, _ints(op, [1, -1, self.dim]))

    def forward(self, op, latent):
        """``latent [b, c, H, W]`` -> ``(tokens [b, h*w, dim], h, w)``."""
        h, w = self.grid_size(op, latent)
        x = self.proj(op, latent)  # [b, dim, h, w]
        x = op.Transpose(op.Reshape(x, _ints(op, [0, 0, -1])), perm=[0, 2, 1])
        return op.Add(x, op.CastLike(self.table(op, h, w), x)), h, w


def unpatchify(op, x, h, w, patch_size: int, channels: int):
    """``[b, h*w, p*p*c]`` -> ``[b, c, h*p, w*p]`` (diffusers' ``nhwpqc->nchpwq``)."""
    p = _ints(op, [patch_size])
    x = op.Reshape(
        x, op.Concat(_ints(op, [0]), h, w, _ints(op, [patch_size, patch_size, channels]), axis=0)
    )
    x = op.Transpose(x, perm=[0, 5, 1, 3, 2, 4])  # [b, c, h, p, w, p]
    return op.Reshape(x, op.Concat(_ints(op, [0, channels]), op.Mul(h, p), op.Mul(w, p), axis=0))


class AxesRotary(nn.Module):
    """Flux's ``FluxPosEmbed``: ids ``[tokens, axes]`` -> ``(cos, sin)`` ``[tokens, head_dim/2]``.

    Axis ``i`` rotates its own ``axes_dim[i]`` channels at frequencies
    ``theta^(-2j/axes_dim[i])``; one matrix ``[axes, head_dim/2]`` holding each
    axis' frequencies in its block (zeros elsewhere) turns the ids into all angles.
    The pairs are adjacent channels (``RotaryEmbedding(interleaved=1)``).
    """

    def __init__(self, axes_dim, theta: float = 10000.0) -> None:
        super().__init__()
        blocks = [1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d) for d in axes_dim]
        self.freqs = np.zeros((len(axes_dim), sum(axes_dim) // 2), np.float32)
        start = 0
        for i, block in enumerate(blocks):
            self.freqs[i, start : start + len(block)] = block
            start += len(block)

    def forward(self, op, ids):
        angles = op.MatMul(
            op.Cast(ids, to=ir.DataType.FLOAT), op.Constant(value=ir.tensor(self.freqs))
        )
        return op.Cos(angles), op.Sin(angles)


class QKNormAttention(Attention):
    """Self-attention with optional per-head RMSNorm of queries and keys (``norm_q``, ``norm_k``).

    ``pre_only`` drops ``to_out`` (Flux's single-stream blocks project afterwards).
    ``bias=False``: no projection has a bias (Flux.2).
    ``rotary`` in :meth:`forward` is ``(cos, sin)`` ``[batch, tokens, head_dim/2]``,
    applied to adjacent channel pairs after the norms.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        dim_head: int,
        qk_norm: bool,
        eps: float = 1e-6,
        pre_only=False,
        bias: bool = True,
    ):
        super().__init__(dim, heads, dim_head, bias=bias, out_bias=bias)
        self.norm_q = RMSNorm(dim_head, eps) if qk_norm else None
        self.norm_k = RMSNorm(dim_head, eps) if qk_norm else None
        if pre_only:
            del self._modules["to_out"]
            self.to_out = None

    def head_norm(self, op, norm, x):
        """``norm`` over each head of ``x [batch, tokens, heads*dim_head]``."""
        if norm is None:
            return x
        heads = op.Reshape(x, _ints(op, [0, 0, self.heads, self.dim_head]))
        return op.Reshape(norm(op, heads), _ints(op, [0, 0, -1]))

    def rotate(self, op, x, rotary):
        if rotary is None:
            return x
        cos, sin = rotary
        return op.RotaryEmbedding(x, cos, sin, interleaved=1, num_heads=self.heads)

    def qkv(self, op, x, rotary=None):
        q = self.rotate(op, self.head_norm(op, self.norm_q, self.to_q(op, x)), rotary)
        k = self.rotate(op, self.head_norm(op, self.norm_k, self.to_k(op, x)), rotary)
        return q, k, self.to_v(op, x)

    def forward(self, op, hidden, rotary=None):
        out = self.attend(op, *self.qkv(op, hidden, rotary))
        return out if self.to_out is None else self.to_out[0](op, out)


class JointAttention(QKNormAttention):
    """Image and text tokens attend together (MMDiT): text has its own ``add_{q,k,v}_proj``.

    Text tokens go first in the joint sequence (as Flux orders them, and its
    rotary tables with them; SD3 has no positions, so the order changes nothing).
    Returns ``(image out, text out)``; the text out is ``None`` when
    ``context_pre_only`` (the last SD3 block has no ``to_add_out``).
    """

    def __init__(
        self, dim, heads, dim_head, qk_norm: bool, context_pre_only=False, eps=1e-6, bias=True
    ):
        super().__init__(dim, heads, dim_head, qk_norm, eps, bias=bias)
        inner = heads * dim_head
        self.add_q_proj = Linear(dim, inner, bias=bias)
        self.add_k_proj = Linear(dim, inner, bias=bias)
        self.add_v_proj = Linear(dim, inner, bias=bias)
        self.norm_added_q = RMSNorm(dim_head, eps) if qk_norm else None
        self.norm_added_k = RMSNorm(dim_head, eps) if qk_norm else None
        self.to_add_out = None if context_pre_only else Linear(inner, dim, bias=bias)

    def forward(self, op, hidden, context, rotary=None, bias=None):
        """``bias`` (optional): added to the joint scores, ``[batch, 1, tokens, tokens]``."""
        q = op.Concat(
            self.head_norm(op, self.norm_added_q, self.add_q_proj(op, context)),
            self.head_norm(op, self.norm_q, self.to_q(op, hidden)),
            axis=1,
        )
        k = op.Concat(
            self.head_norm(op, self.norm_added_k, self.add_k_proj(op, context)),
            self.head_norm(op, self.norm_k, self.to_k(op, hidden)),
            axis=1,
        )
        v = op.Concat(self.add_v_proj(op, context), self.to_v(op, hidden), axis=1)
        out = self.attend(op, self.rotate(op, q, rotary), self.rotate(op, k, rotary), v, bias)
        text = op.Shape(context, start=1, end=2)
        context_out, hidden_out = op.Split(
            out,
            op.Concat(text, op.Sub(op.Shape(out, start=1, end=2), text), axis=0),
            axis=1,
            _outputs=2,
        )
        hidden_out = self.to_out[0](op, hidden_out)
        return hidden_out, None if self.to_add_out is None else self.to_add_out(op, context_out)


class JointTransformerBlock(nn.Module):
    """The MMDiT block of SD3 and Flux's double-stream block: joint attention, two feed-forwards.

    ``context_pre_only`` (SD3's last block) normalises the text with
    ``AdaLayerNormContinuous`` and returns no text.
    """

    def __init__(self, dim, heads, dim_head, qk_norm: bool, context_pre_only: bool = False):
        super().__init__()
        self.norm1 = self.make_norm1(dim)
        self.norm1_context = (
            AdaLayerNormContinuous(dim) if context_pre_only else AdaLayerNormZero(dim)
        )
        self.attn = JointAttention(dim, heads, dim_head, qk_norm, context_pre_only)
        self.norm2 = WeightlessLayerNorm(dim)
        self.ff = FeedForward(dim, dim, activation_fn="gelu-approximate")
        self.context_pre_only = context_pre_only
        if not context_pre_only:
            self.norm2_context = WeightlessLayerNorm(dim)
            self.ff_context = FeedForward(dim, dim, activation_fn="gelu-approximate")

    def make_norm1(self, dim):
        return AdaLayerNormZero(dim)

    def image_attention(self, op, hidden, norm1_out, context_normed, rotary):
        """``(hidden + gated attention, image-side AdaLN outputs for the MLP, text attention out)``."""
        normed, gate_msa, shift_mlp, scale_mlp, gate_mlp = norm1_out
        attn, context_attn = self.attn(op, normed, context_normed, rotary)
        return (
            op.Add(hidden, gated(op, gate_msa, attn)),
            (shift_mlp, scale_mlp, gate_mlp),
            context_attn,
        )

    def forward(self, op, hidden, context, temb, rotary=None):
        """-> ``(context, hidden)``; ``context`` is ``None`` for ``context_pre_only``."""
        if self.context_pre_only:
            context_normed = self.norm1_context(op, context, temb)
        else:
            context_normed, c_gate_msa, c_shift_mlp, c_scale_mlp, c_gate_mlp = self.norm1_context(
                op, context, temb
            )
        hidden, (shift_mlp, scale_mlp, gate_mlp), context_attn = self.image_attention(
            op, hidden, self.norm1(op, hidden, temb), context_normed, rotary
        )
        ff = self.ff(op, modulate(op, self.norm2(op, hidden), shift_mlp, scale_mlp))
        hidden = op.Add(hidden, gated(op, gate_mlp, ff))
        if self.context_pre_only:
            return None, hidden
        context = op.Add(context, gated(op, c_gate_msa, context_attn))
        ff = self.ff_context(
            op, modulate(op, self.norm2_context(op, context), c_shift_mlp, c_scale_mlp)
        )
        return op.Add(context, gated(op, c_gate_mlp, ff)), hidden
