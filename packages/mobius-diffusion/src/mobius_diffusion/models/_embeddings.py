"""Timestep embeddings shared by the denoisers (UNets, DiTs, SD3, Flux): diffusers' layouts."""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, get_activation


def timestep_embedding(
    op,
    timesteps: ir.Value,
    dim: int,
    flip_sin_to_cos: bool = False,
    downscale_freq_shift: float = 1.0,
    scale: float = 1.0,
    max_period: int = 10000,
) -> ir.Value:
    """diffusers' ``get_timestep_embedding``: [batch] (any number type) -> float32 [batch, dim]."""
    half = dim // 2
    exponent = (
        -math.log(max_period) * np.arange(half, dtype=np.float32) / (half - downscale_freq_shift)
    )
    # float32 exponents as diffusers', exp in float64 rounded once: numpy's float32 exp is an
    # ulp off torch's for many (a guidance of 6000 in the sinusoid turns that into 1e-4)
    freqs = np.exp(exponent.astype(np.float64)).astype(np.float32)
    freqs = op.Constant(value=ir.tensor(freqs))
    args = op.Mul(op.Unsqueeze(op.Cast(timesteps, to=ir.DataType.FLOAT), [1]), freqs)
    if scale != 1:
        args = op.Mul(args, op.Constant(value_float=float(scale)))
    sin, cos = op.Sin(args), op.Cos(args)
    emb = op.Concat(cos, sin, axis=-1) if flip_sin_to_cos else op.Concat(sin, cos, axis=-1)
    if dim % 2:
        emb = op.Pad(emb, op.Constant(value_ints=[0, 0, 0, 1]))
    return emb


class Timesteps(nn.Module):
    """diffusers' ``Timesteps``: the sinusoidal embedding, no parameters."""

    def __init__(
        self,
        num_channels: int,
        flip_sin_to_cos: bool,
        downscale_freq_shift: float,
        scale: float = 1.0,
    ):
        super().__init__()
        self.num_channels, self.flip, self.shift, self.scale = (
            num_channels,
            flip_sin_to_cos,
            downscale_freq_shift,
            scale,
        )

    def forward(self, op, timesteps, like: ir.Value):
        """The embedding of ``timesteps`` [batch], in ``like``'s dtype (diffusers casts it so)."""
        emb = timestep_embedding(
            op, timesteps, self.num_channels, self.flip, self.shift, self.scale
        )
        return op.CastLike(emb, like)


class TimestepEmbedding(nn.Module):
    """diffusers' ``TimestepEmbedding``: ``linear_1``, activation, ``linear_2`` (optional ``cond_proj``)."""

    def __init__(
        self,
        in_channels: int,
        time_embed_dim: int,
        act_fn: str = "silu",
        out_dim: int | None = None,
        cond_proj_dim: int | None = None,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.linear_1 = Linear(in_channels, time_embed_dim, bias=bias)
        self.cond_proj = Linear(cond_proj_dim, in_channels, bias=False) if cond_proj_dim else None
        self.act = get_activation(act_fn)
        self.linear_2 = Linear(time_embed_dim, out_dim or time_embed_dim, bias=bias)

    def forward(self, op, sample, condition=None):
        if self.cond_proj is not None and condition is not None:
            sample = op.Add(sample, self.cond_proj(op, condition))
        return self.linear_2(op, self.act(op, self.linear_1(op, sample)))
