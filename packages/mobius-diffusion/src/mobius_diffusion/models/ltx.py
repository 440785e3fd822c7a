"""LTX-Video's transformer: a PixArt-style DiT over packed video tokens, with 3-D rotary positions.

The latent video comes packed as tokens ``[b, frames * rows * columns, channels]``
(the pipeline packs it); ``proj_in`` widens them. The timestep is embedded once
(``time_embed``, adaLN-single) into six modulation vectors that each block adds to
its own ``scale_shift_table``; the T5 caption goes through ``caption_projection``.
A block runs modulated self-attention (RMS norms without weights in front, RMS-normed
queries and keys across all heads, rotary positions), cross-attention to the caption
(its padding masked by a -10000 bias, as diffusers does) and a modulated feed-forward.
``norm_out`` modulated by ``scale_shift_table + embedded timestep`` and ``proj_out`` end it.

The rotation spans the whole projection (all heads at once), not each head: LTX's
``dim // 6`` frequencies ``theta^linspace(0, 1)`` times pi/2, each turned by the three
coordinates of a token (frame, row, column), are laid out frequency-major
(``f0·frame, f0·row, f0·col, f1·frame...``) on adjacent channel pairs, after
``dim % 6`` unrotated channels. A coordinate is ``2 * position * scale * patch / base - 1``
with bases (20 frames, 2048 rows, 2048 columns) and the pipeline's
``rope_interpolation_scale``: (VAE temporal compression / frame rate, spatial
compression, spatial compression). The frequencies are computed at export in float64
and stored in float32; diffusers computes them in float32 (``linspace`` and ``pow``), so
a wide model differs from it by an ulp in a few frequencies, as diffusers on two devices does.

Module tree and names follow diffusers' ``LTXVideoTransformer3DModel`` checkpoints.
Graph (:class:`mobius.tasks.DenoisingTask`): ``hidden_states`` [batch, video_tokens,
in_channels], ``encoder_hidden_states`` [batch, sequence, caption_channels],
``encoder_attention_mask`` int64 [batch, sequence], ``timestep`` [batch] (the
scheduler's, in [0, 1000]), ``video_shape`` int64 [3] (the token grid: frames, rows,
columns), ``rope_interpolation_scale`` float32 [3] -> ``out_hidden_states`` [batch,
video_tokens, out_channels].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, RMSNorm
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._attention import Attention, FeedForward
from mobius_diffusion.models._checks import config_choice, config_float, config_int
from mobius_diffusion.models._dit_blocks import TextProjection, WeightlessLayerNorm, _ints
from mobius_diffusion.models.pixart import AdaLayerNormSingle, caption_bias, table_modulation
from mobius_diffusion.tasks import GraphSpec

#: diffusers' ``LTXAttention``: eps of the query and key RMS norms (fixed, not in the config).
QK_NORM_EPS = 1e-5
#: ``LTXVideoRotaryPosEmbed``'s bases: (frames, rows, columns), and theta.
ROPE_BASES = (20.0, 2048.0, 2048.0)
ROPE_THETA = 10000.0


def config_bool(config: Any, name: str, default: bool) -> bool:
    """``config.name``: a boolean."""
    value = getattr(config, name, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{config.model_type} {name} must be true or false, got {value!r}")
    return value


@dataclass
class LTXVideoConfig:
    in_channels: int = 128
    out_channels: int = 128
    patch_size: int = 1
    patch_size_t: int = 1
    num_attention_heads: int = 32
    attention_head_dim: int = 64
    num_layers: int = 28
    activation_fn: str = "gelu-approximate"
    norm_elementwise_affine: bool = False
    norm_eps: float = 1e-6
    caption_channels: int = 4096
    attention_bias: bool = True
    attention_out_bias: bool = True

    @classmethod
    def from_hf(cls, config: Any) -> LTXVideoConfig:
        config_choice(config, "qk_norm", "rms_norm_across_heads", ("rms_norm_across_heads",))
        in_channels = config_int(config, "in_channels", 128)
        c = cls(
            in_channels=in_channels,
            # diffusers' ``out_channels or in_channels``
            out_channels=config_int(config, "out_channels", None)
            if getattr(config, "out_channels", None)
            else in_channels,
            patch_size=config_int(config, "patch_size", 1),
            patch_size_t=config_int(config, "patch_size_t", 1),
            num_attention_heads=config_int(config, "num_attention_heads", 32),
            attention_head_dim=config_int(config, "attention_head_dim", 64),
            num_layers=config_int(config, "num_layers", 28),
            activation_fn=config_choice(
                config, "activation_fn", "gelu-approximate", FeedForward.ACTIVATIONS
            ),
            norm_elementwise_affine=config_bool(config, "norm_elementwise_affine", False),
            norm_eps=config_float(config, "norm_eps", 1e-6),
            caption_channels=config_int(config, "caption_channels", 4096),
            attention_bias=config_bool(config, "attention_bias", True),
            attention_out_bias=config_bool(config, "attention_out_bias", True),
        )
        cross = config_int(config, "cross_attention_dim", 2048)
        if cross != c.inner_dim:  # the projected caption is inner_dim wide
            raise ConfigError(
                f"{config.model_type} cross_attention_dim {cross} must be the inner dim "
                f"{c.inner_dim} (num_attention_heads x attention_head_dim)"
            )
        if c.inner_dim % 2:
            raise ConfigError(
                f"{config.model_type} inner dim {c.inner_dim} must be even (rotary pairs)"
            )
        return c

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim


class WeightlessRMSNorm(nn.Module):
    """diffusers' ``RMSNorm(dim, eps, elementwise_affine=False)``: no parameters."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, op, x):
        ones = op.CastLike(op.Constant(value=ir.tensor(np.ones(self.dim, np.float32))), x)
        return op.RMSNormalization(x, ones, axis=-1, epsilon=self.eps, stash_type=1)


def rms_norm(dim: int, eps: float, elementwise_affine: bool) -> nn.Module:
    """diffusers' ``RMSNorm(dim, eps, elementwise_affine)``: with ``weight`` or none."""
    return RMSNorm(dim, eps) if elementwise_affine else WeightlessRMSNorm(dim, eps)


class LTXVideoRotary(nn.Module):
    """``(video_shape, rope_interpolation_scale)`` -> float32 ``(cos, sin)`` [tokens, dim/2]."""

    def __init__(self, dim: int, patch_size: int, patch_size_t: int) -> None:
        super().__init__()
        count = dim // 6
        exponents = np.arange(count, dtype=np.float64) / max(count - 1, 1)
        freqs = (ROPE_THETA**exponents).astype(np.float32)
        # diffusers' ``freqs * math.pi / 2.0`` on float32 values
        freqs = freqs * np.float32(math.pi) / np.float32(2.0)
        self.freqs = np.repeat(freqs, 3)  # frequency-major: (f0, f0, f0, f1...) by axis
        self.count, self.pad = count, (dim % 6) // 2
        self.patches = (float(patch_size_t), float(patch_size), float(patch_size))

    def coordinate(self, op, size, scale, axis: int):
        """``2 * arange(size) * scale * patch / base - 1``, float32 ``[size]``."""
        size = op.Squeeze(op.Cast(size, to=ir.DataType.FLOAT))
        x = op.Range(op.Constant(value_float=0.0), size, op.Constant(value_float=1.0))
        x = op.Mul(x, op.Gather(scale, _ints(op, [axis])))  # diffusers' order of operations
        x = op.Div(op.Mul(x, self.patches[axis]), ROPE_BASES[axis])
        return op.Sub(op.Mul(x, 2.0), 1.0)

    def forward(self, op, video_shape, scale):
        sizes = [op.Slice(video_shape, _ints(op, [i]), _ints(op, [i + 1])) for i in range(3)]
        grid = op.Concat(*sizes, _ints(op, [1]), axis=0)
        axes = []
        for axis in range(3):  # each coordinate broadcast over the (frame, row, column) grid
            view = [1, 1, 1, 1]
            view[axis] = -1
            coord = op.Reshape(self.coordinate(op, sizes[axis], scale, axis), _ints(op, view))
            axes.append(op.Expand(coord, grid))
        coords = op.Reshape(op.Concat(*axes, axis=-1), _ints(op, [-1, 3]))  # [tokens, 3]
        freqs = op.Constant(value=ir.tensor(self.freqs))
        angles = op.Mul(op.Tile(coords, _ints(op, [1, self.count])), freqs)  # [tokens, 3 * count]
        cos, sin = op.Cos(angles), op.Sin(angles)
        if self.pad:  # the first dim % 6 channels are not rotated: cos 1, sin 0
            shape = op.Concat(op.Shape(coords, start=0, end=1), _ints(op, [self.pad]), axis=0)
            one, zero = (op.Constant(value=ir.tensor(np.full(1, v, np.float32))) for v in (1, 0))
            cos = op.Concat(op.Expand(one, shape), cos, axis=-1)
            sin = op.Concat(op.Expand(zero, shape), sin, axis=-1)
        return cos, sin


class LTXAttention(Attention):
    """Attention with RMS norms of the queries and keys across all heads (``norm_q``/``norm_k``);
    rotary positions (self-attention) turn the whole projection, then the heads split."""

    def __init__(self, dim: int, heads: int, dim_head: int, bias: bool, out_bias: bool) -> None:
        super().__init__(dim, heads, dim_head, bias=bias, out_bias=out_bias)
        self.norm_q = RMSNorm(heads * dim_head, QK_NORM_EPS)
        self.norm_k = RMSNorm(heads * dim_head, QK_NORM_EPS)

    def forward(self, op, hidden, context=None, rotary=None, bias=None):
        context = hidden if context is None else context
        q = self.norm_q(op, self.to_q(op, hidden))
        k = self.norm_k(op, self.to_k(op, context))
        if rotary is not None:  # one "head" of the full width: the pairs run across heads
            cos, sin = rotary
            q = op.RotaryEmbedding(q, cos, sin, interleaved=1, num_heads=1)
            k = op.RotaryEmbedding(k, cos, sin, interleaved=1, num_heads=1)
        return self.to_out[0](op, self.attend(op, q, k, self.to_v(op, context), bias))


class LTXVideoTransformerBlock(nn.Module):
    """Modulated self-attention, cross-attention (no norm), modulated feed-forward."""

    def __init__(self, c: LTXVideoConfig) -> None:
        super().__init__()
        dim, heads, head_dim = c.inner_dim, c.num_attention_heads, c.attention_head_dim
        bias, out_bias = c.attention_bias, c.attention_out_bias
        self.norm1 = rms_norm(dim, c.norm_eps, c.norm_elementwise_affine)
        self.attn1 = LTXAttention(dim, heads, head_dim, bias, out_bias)
        self.norm2 = rms_norm(dim, c.norm_eps, c.norm_elementwise_affine)
        self.attn2 = LTXAttention(dim, heads, head_dim, bias, out_bias)
        self.ff = FeedForward(dim, activation_fn=c.activation_fn)
        self.scale_shift_table = nn.Parameter([6, dim])

    def forward(self, op, x, context, caption, temb, rotary):
        """``temb`` [batch, 6 * dim]; ``caption``: the caption's key bias."""
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = table_modulation(
            op, self.scale_shift_table, temb
        )  # each [batch, 1, dim]
        normed = op.Add(op.Mul(self.norm1(op, x), op.Add(scale_msa, 1.0)), shift_msa)
        x = op.Add(x, op.Mul(self.attn1(op, normed, rotary=rotary), gate_msa))
        x = op.Add(x, self.attn2(op, x, context, bias=caption))
        normed = op.Add(op.Mul(self.norm2(op, x), op.Add(scale_mlp, 1.0)), shift_mlp)
        return op.Add(x, op.Mul(self.ff(op, normed), gate_mlp))


class LTXVideoTransformer3DModel(Model):
    """diffusers' ``LTXVideoTransformer3DModel``; see the module docstring for the graph."""

    config_class = LTXVideoConfig
    task = "denoising"

    def __init__(self, config: LTXVideoConfig) -> None:
        super().__init__()
        c = self.config = config
        dim = c.inner_dim
        self.rope = LTXVideoRotary(dim, c.patch_size, c.patch_size_t)
        self.proj_in = Linear(c.in_channels, dim, bias=True)
        self.scale_shift_table = nn.Parameter([2, dim])
        self.time_embed = AdaLayerNormSingle(dim, use_additional_conditions=False)
        self.caption_projection = TextProjection(c.caption_channels, dim, act_fn="gelu_tanh")
        self.transformer_blocks = nn.ModuleList(
            [LTXVideoTransformerBlock(c) for _ in range(c.num_layers)]
        )
        self.norm_out = WeightlessLayerNorm(dim, 1e-6)
        self.proj_out = Linear(dim, c.out_channels, bias=True)

    def forward(
        self,
        op,
        hidden_states,
        encoder_hidden_states,
        encoder_attention_mask,
        timestep,
        video_shape,
        rope_interpolation_scale,
    ):
        hidden = self.proj_in(op, hidden_states)
        cos, sin = self.rope(op, video_shape, rope_interpolation_scale)
        rows = op.Concat(op.Shape(hidden, start=0, end=1), op.Shape(cos), axis=0)
        rotary = (
            op.Expand(op.CastLike(cos, hidden), rows),
            op.Expand(op.CastLike(sin, hidden), rows),
        )
        temb, embedded = self.time_embed(op, timestep, hidden)  # [b, 6 * dim], [b, dim]
        context = self.caption_projection(op, encoder_hidden_states)
        caption = caption_bias(op, encoder_attention_mask, hidden)
        for block in self.transformer_blocks:
            hidden = block(op, hidden, context, caption, temb, rotary)
        shift, scale = op.Split(
            op.Add(self.scale_shift_table, op.Unsqueeze(embedded, _ints(op, [1]))),
            axis=1,
            num_outputs=2,
            _outputs=2,
        )  # each [batch, 1, dim]
        hidden = op.Add(op.Mul(self.norm_out(op, hidden), op.Add(scale, 1.0)), shift)
        return self.proj_out(op, hidden)

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        inputs = {
            "hidden_states": (None, ["batch", "video_tokens", c.in_channels]),
            "encoder_hidden_states": (None, ["batch", "sequence", c.caption_channels]),
            "encoder_attention_mask": (ir.DataType.INT64, ["batch", "sequence"]),
            "timestep": (None, ["batch"]),
            "video_shape": (ir.DataType.INT64, [3]),
            "rope_interpolation_scale": (ir.DataType.FLOAT, [3]),
        }
        outputs = {"out_hidden_states": ["batch", "video_tokens", c.out_channels]}

        def forward(op, **values):
            return {"out_hidden_states": self(op, **values)}

        return {"model": GraphSpec(inputs, outputs, forward)}


MODEL_TYPES = {"LTXVideoTransformer3DModel": LTXVideoTransformer3DModel}
