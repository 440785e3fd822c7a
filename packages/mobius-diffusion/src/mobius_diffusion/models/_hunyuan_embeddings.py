"""HunyuanDiT's conditioning and positions: the T5 pooler, the timestep + size + style
embedding, and the pipeline's 2-D RoPE computed in the graph (see :mod:`.hunyuan_dit`)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, Linear, bidirectional_attention
from mobius_diffusion.models._dit_blocks import TextProjection, _ints
from mobius_diffusion.models._embeddings import TimestepEmbedding, Timesteps

#: heads of the T5 pooler and width of every sinusoid (fixed in diffusers).
POOL_HEADS, SINUSOID = 8, 256


class HunyuanDiTAttentionPool(nn.Module):
    """The T5 states' mean, with learned positions, attends over them: ``[b, L, C] -> [b, out]``."""

    def __init__(self, tokens: int, dim: int, out_dim: int) -> None:
        super().__init__()
        self.positional_embedding = nn.Parameter([tokens + 1, dim])
        self.k_proj = Linear(dim, dim, bias=True)
        self.q_proj = Linear(dim, dim, bias=True)
        self.v_proj = Linear(dim, dim, bias=True)
        self.c_proj = Linear(dim, out_dim, bias=True)
        self.dim = dim

    def forward(self, op, x):
        x = op.Concat(op.ReduceMean(x, _ints(op, [1]), keepdims=1), x, axis=1)  # [b, 1+L, C]
        x = op.Add(x, self.positional_embedding)
        query = op.Slice(x, _ints(op, [0]), _ints(op, [1]), _ints(op, [1]))
        out = bidirectional_attention(
            op,
            self.q_proj(op, query),
            self.k_proj(op, x),
            self.v_proj(op, x),
            None,
            POOL_HEADS,
            (self.dim // POOL_HEADS) ** -0.5,
        )
        return op.Squeeze(self.c_proj(op, out), _ints(op, [1]))


class HunyuanCombinedTimestepTextSizeStyleEmbedding(nn.Module):
    """Timestep embedding plus ``extra_embedder`` of [pooled T5, size sinusoids, style]."""

    def __init__(self, config) -> None:
        """``config``: a :class:`~.hunyuan_dit.HunyuanDiTConfig`."""
        super().__init__()
        c, dim = config, config.inner_dim
        self.time_proj = Timesteps(SINUSOID, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.timestep_embedder = TimestepEmbedding(SINUSOID, dim)
        self.size_proj = Timesteps(SINUSOID, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.pooler = HunyuanDiTAttentionPool(
            c.text_len_t5, c.cross_attention_dim_t5, c.pooled_projection_dim
        )
        extra = c.pooled_projection_dim
        self.style_embedder = None
        if c.use_style_cond_and_image_meta_size:
            self.style_embedder = Embedding(1, dim)
            extra += 6 * SINUSOID + dim
        self.extra_embedder = TextProjection(extra, 4 * dim, "silu", out_features=dim)

    def forward(self, op, timestep, t5, image_meta_size, style, like):
        extra = [self.pooler(op, t5)]
        if self.style_embedder is not None:
            sizes = self.size_proj(op, op.Reshape(image_meta_size, _ints(op, [-1])), like)
            extra += [
                op.Reshape(sizes, _ints(op, [-1, 6 * SINUSOID])),
                self.style_embedder(op, style),
            ]
        t_emb = self.timestep_embedder(op, self.time_proj(op, timestep, like))
        return op.Add(t_emb, self.extra_embedder(op, op.Concat(*extra, axis=1)))


class HunyuanRotaryPosEmbed(nn.Module):
    """``(cos, sin)`` ``[h*w, head_dim/2]``: the pipeline's ``get_2d_rotary_pos_embed`` of the
    grid's crop region in a ``base_size`` square (see the module docstring)."""

    def __init__(self, head_dim: int, base_size: int) -> None:
        super().__init__()
        half = head_dim // 2
        exponents = np.arange(0, half, 2, dtype=np.float32)[: half // 2] / np.float32(half)
        # theta ** e rounded once to float32 (numpy's float32 pow is an ulp off torch's), then 1/x
        powers = (10000.0 ** exponents.astype(np.float64)).astype(np.float32)
        self.inv_freq = np.float32(1.0) / powers
        self.base_size = float(base_size)

    def positions(self, op, n, start, stop):
        """float32 ``[n]``: torch's ``linspace(start, stop * (n-1)/n, n)`` (float64 bounds)."""
        n_double = op.Cast(n, to=ir.DataType.DOUBLE)
        first = op.Cast(start, to=ir.DataType.FLOAT)
        last = op.Cast(op.Div(op.Mul(stop, op.Sub(n_double, 1.0)), n_double), to=ir.DataType.FLOAT)
        one = _ints(op, [1])
        step = op.Div(
            op.Sub(last, first), op.Cast(op.Max(op.Sub(n, one), one), to=ir.DataType.FLOAT)
        )
        index = op.Range(op.Constant(value_int=0), op.Squeeze(n), op.Constant(value_int=1))
        from_end = op.Cast(op.Sub(op.Sub(n, one), index), to=ir.DataType.FLOAT)
        # torch walks the first half up from start, the second down from the end
        return op.Where(
            op.Less(index, op.Max(op.Div(n, _ints(op, [2])), one)),
            op.Add(first, op.Mul(step, op.Cast(index, to=ir.DataType.FLOAT))),
            op.Sub(last, op.Mul(step, from_end)),
        )

    def forward(self, op, h, w):
        base = op.Constant(value=ir.tensor(np.array([self.base_size])))  # float64
        hd, wd = op.Cast(h, to=ir.DataType.DOUBLE), op.Cast(w, to=ir.DataType.DOUBLE)
        tall = op.Greater(h, w)  # the long side fills the square, the other keeps the aspect
        height = op.Where(tall, base, op.Round(op.Mul(op.Div(base, wd), hd)))
        width = op.Where(tall, op.Round(op.Mul(op.Div(base, hd), wd)), base)
        top = op.Round(op.Div(op.Sub(base, height), 2.0))
        left = op.Round(op.Div(op.Sub(base, width), 2.0))
        rows = self.positions(op, h, top, op.Add(top, height))
        cols = self.positions(op, w, left, op.Add(left, width))
        freqs = op.Constant(value=ir.tensor(self.inv_freq))
        quarter = len(self.inv_freq)
        shape = op.Concat(h, w, _ints(op, [quarter]), axis=0)
        row_angles = op.Expand(op.Unsqueeze(op.Mul(op.Unsqueeze(rows, [1]), freqs), [1]), shape)
        col_angles = op.Expand(op.Unsqueeze(op.Mul(op.Unsqueeze(cols, [1]), freqs), [0]), shape)
        angles = op.Reshape(
            op.Concat(col_angles, row_angles, axis=-1), _ints(op, [-1, 2 * quarter])
        )
        return op.Cos(angles), op.Sin(angles)
