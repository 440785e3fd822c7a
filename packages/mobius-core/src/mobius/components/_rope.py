"""Rotary position embeddings: the frequency schedules and their application.

Frequencies follow transformers' ``rope_parameters`` types. Static schedules are
computed here in float32 (as PyTorch does) and baked into the graph; ``dynamic``
(NTK) and ``longrope`` depend on the longest position seen, so their graphs
compute the schedule from ``position_ids`` at run time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components._budget import check_constant_size
from mobius.config import RopeConfig
from mobius.errors import ConfigError

# ``Value.meta`` key of the RotaryTable behind a cos/sin value (not saved in the model).
ROTARY_TABLE = "mobius.rotary_table"


def rotary_dim(rope: RopeConfig, head_dim: int) -> int:
    """How many leading channels of each head rotate (``partial_rotary_factor`` of ``head_dim``)."""
    return int(head_dim * rope.partial_rotary_factor)


def _exponents(dim: int) -> np.ndarray:
    return np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)


def default_inv_freq(base: float, dim: int) -> np.ndarray:
    return (1.0 / (np.float32(base) ** _exponents(dim))).astype(np.float32)


def _llama3(rope: RopeConfig, dim: int) -> np.ndarray:
    inv_freq = default_inv_freq(rope.theta, dim)
    factor, low, high = rope.factor, rope.low_freq_factor, rope.high_freq_factor
    old_context = rope.original_max_position_embeddings
    low_wavelen, high_wavelen = old_context / low, old_context / high
    wavelen = (2 * math.pi / inv_freq).astype(np.float32)
    scaled = np.where(wavelen > low_wavelen, inv_freq / factor, inv_freq).astype(np.float32)
    smooth = ((old_context / wavelen - low) / (high - low)).astype(np.float32)
    smoothed = ((1 - smooth) * scaled / factor + smooth * scaled).astype(np.float32)
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def _yarn(rope: RopeConfig, dim: int, max_positions: int) -> tuple[np.ndarray, float]:
    original = rope.original_max_position_embeddings or max_positions
    factor = rope.factor if rope.factor is not None else max_positions / original

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention_factor = rope.attention_factor
    if attention_factor is None:
        if rope.mscale and rope.mscale_all_dim:
            attention_factor = mscale(factor, rope.mscale) / mscale(factor, rope.mscale_all_dim)
        else:
            attention_factor = mscale(factor)
    beta_fast, beta_slow = rope.beta_fast or 32, rope.beta_slow or 1

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(rope.theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if rope.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # as transformers does, to avoid a zero-width ramp
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / (high - low), 0, 1)
    extrapolation = (1 - ramp).astype(np.float32)
    pos_freqs = (np.float32(rope.theta) ** _exponents(dim)).astype(np.float32)
    inv_extra = (1.0 / pos_freqs).astype(np.float32)
    inv_inter = (1.0 / (np.float32(factor) * pos_freqs)).astype(np.float32)
    inv_freq = inv_inter * (1 - extrapolation) + inv_extra * extrapolation
    return inv_freq.astype(np.float32), float(attention_factor)


def _longrope_attention_factor(rope: RopeConfig, max_positions: int) -> float:
    original = rope.original_max_position_embeddings
    factor = rope.factor if rope.factor is not None else max_positions / original
    if rope.attention_factor is not None:
        return rope.attention_factor
    if factor <= 1.0:
        return 1.0
    return math.sqrt(1 + math.log(factor) / math.log(original))


@dataclass(frozen=True)
class RotaryTable:
    """A static schedule, recorded on the cos/sin values it makes so fused kernels can use a table."""

    inv_freq: np.ndarray
    attention_scaling: float
    max_positions: int

    def cos_sin(self) -> tuple[np.ndarray, np.ndarray]:
        """``cos, sin [max_positions, rotary_dim/2]`` in float32, as the graph computes them.

        Raises:
            ConfigError: the table is over :data:`~mobius.components.CONSTANT_BUDGET`
                (checked before anything is allocated).
        """
        shape = (self.max_positions, len(self.inv_freq))
        check_constant_size(shape, 4, "rotary cos/sin table", "max_position_embeddings")
        positions = np.arange(self.max_positions, dtype=np.float32)[:, None]
        freqs = positions * self.inv_freq[None, :]
        scaling = np.float32(self.attention_scaling)
        sin = np.sin(freqs)
        cos = np.cos(freqs, out=freqs)  # in place: the table is the largest array of a build
        cos *= scaling
        sin *= scaling
        return cos, sin


class RotaryEmbedding(nn.Module):
    """cos/sin ``[batch, seq, rotary_dim/2]`` for ``position_ids`` from a fixed frequency table.

    With ``max_positions`` known, the outputs carry a :class:`RotaryTable` in their
    ``meta`` so that ``GroupQueryAttention`` can rotate inside its kernel.
    """

    def __init__(
        self,
        inv_freq: np.ndarray,
        attention_scaling: float = 1.0,
        max_positions: int | None = None,
    ) -> None:
        super().__init__()
        self.inv_freq = np.asarray(inv_freq, dtype=np.float32)
        self.attention_scaling = attention_scaling
        self.max_positions = max_positions

    def table(self) -> RotaryTable | None:
        """The static table of this schedule, or ``None`` when it depends on the input."""
        if self.max_positions is None or type(self).inverse_frequencies is not (
            RotaryEmbedding.inverse_frequencies
        ):
            return None
        return RotaryTable(self.inv_freq, self.attention_scaling, self.max_positions)

    def inverse_frequencies(self, op, position_ids: ir.Value) -> ir.Value:
        return op.Constant(value=ir.tensor(self.inv_freq))

    def forward(self, op, position_ids: ir.Value) -> tuple[ir.Value, ir.Value]:
        inv_freq = self.inverse_frequencies(op, position_ids)  # [dim/2]
        positions = op.Unsqueeze(op.Cast(position_ids, to=ir.DataType.FLOAT), [-1])
        freqs = op.Mul(positions, inv_freq)  # [batch, seq, dim/2]
        cos, sin = op.Cos(freqs), op.Sin(freqs)
        if self.attention_scaling != 1.0:
            cos, sin = op.Mul(cos, self.attention_scaling), op.Mul(sin, self.attention_scaling)
        table = self.table()
        if table is not None:
            cos.meta[ROTARY_TABLE], sin.meta[ROTARY_TABLE] = table, table
        return cos, sin


def _longest_sequence(op, position_ids: ir.Value) -> ir.Value:
    """``max(position_ids) + 1`` as a float scalar: the length the schedule must cover."""
    return op.Cast(op.Add(op.ReduceMax(position_ids, keepdims=0), 1), to=ir.DataType.FLOAT)


class DynamicNTKRotaryEmbedding(RotaryEmbedding):
    """NTK-aware scaling: the base grows once the sequence exceeds ``max_position_embeddings``."""

    def __init__(self, rope: RopeConfig, dim: int, max_positions: int) -> None:
        super().__init__(default_inv_freq(rope.theta, dim))
        self.base, self.dim, self.factor = rope.theta, dim, rope.factor
        self.max_positions = max_positions

    def inverse_frequencies(self, op, position_ids: ir.Value) -> ir.Value:
        seq_len = op.Max(_longest_sequence(op, position_ids), float(self.max_positions))
        growth = op.Sub(
            op.Div(op.Mul(seq_len, float(self.factor)), float(self.max_positions)),
            float(self.factor) - 1.0,
        )
        base = op.Mul(op.Pow(growth, self.dim / (self.dim - 2)), float(self.base))
        exponents = op.Constant(value=ir.tensor(_exponents(self.dim)))
        return op.Reciprocal(op.Pow(base, exponents))


class LongRopeRotaryEmbedding(RotaryEmbedding):
    """Phi-3 LongRoPE: short factors within the original context, long factors beyond it."""

    def __init__(self, rope: RopeConfig, dim: int, max_positions: int) -> None:
        base = default_inv_freq(rope.theta, dim)
        super().__init__(base, _longrope_attention_factor(rope, max_positions))
        self.short = (base / np.asarray(rope.short_factor, np.float32)).astype(np.float32)
        self.long = (base / np.asarray(rope.long_factor, np.float32)).astype(np.float32)
        self.original = rope.original_max_position_embeddings

    def inverse_frequencies(self, op, position_ids: ir.Value) -> ir.Value:
        is_long = op.Greater(_longest_sequence(op, position_ids), float(self.original))
        return op.Where(
            is_long,
            op.Constant(value=ir.tensor(self.long)),
            op.Constant(value=ir.tensor(self.short)),
        )


def make_rotary_embedding(rope: RopeConfig, head_dim: int, max_positions: int) -> RotaryEmbedding:
    """The rotary module for a rope config (every transformers type but ``proportional``)."""
    dim = rotary_dim(rope, head_dim)
    kind = rope.rope_type
    if kind == "default":
        return RotaryEmbedding(default_inv_freq(rope.theta, dim), max_positions=max_positions)
    if kind == "linear":
        inv_freq = default_inv_freq(rope.theta, dim) / np.float32(rope.factor)
        return RotaryEmbedding(inv_freq, max_positions=max_positions)
    if kind == "llama3":
        return RotaryEmbedding(_llama3(rope, dim), max_positions=max_positions)
    if kind == "yarn":
        return RotaryEmbedding(*_yarn(rope, dim, max_positions), max_positions=max_positions)
    if kind == "dynamic":
        return DynamicNTKRotaryEmbedding(rope, dim, max_positions)
    if kind == "longrope":
        return LongRopeRotaryEmbedding(rope, dim, max_positions)
    raise ConfigError(
        f"rope_type {kind!r} is not implemented; mobius builds default, linear, llama3, "
        "yarn, dynamic and longrope"
    )


def cast_like(op, value: ir.Value, like: ir.Value) -> ir.Value:
    """``value`` in ``like``'s dtype, without a node when it already is (or a static Cast)."""
    if like.dtype is None:
        return op.CastLike(value, like)
    if value.dtype == like.dtype:
        return value
    return op.Cast(value, to=like.dtype)


def apply_rotary(
    op, x: ir.Value, cos: ir.Value, sin: ir.Value, rotary_dim: int, interleaved: bool = False
) -> ir.Value:
    """Rotate the first ``rotary_dim`` channels of ``x [batch, heads, seq, head_dim]``.

    The default pairs channel ``i`` with ``i + rotary_dim/2`` (rotate-half, Llama);
    ``interleaved`` pairs adjacent channels ``(0, 1), (2, 3)...`` (GPT-J, GLM, Helium).
    """
    cos, sin = cast_like(op, cos, x), cast_like(op, sin, x)
    return op.RotaryEmbedding(
        x, cos, sin, interleaved=int(interleaved), rotary_embedding_dim=rotary_dim
    )
