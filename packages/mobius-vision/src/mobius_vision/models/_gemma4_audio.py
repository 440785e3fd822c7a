"""Gemma 4's audio encoder (transformers' ``Gemma4AudioModel``, a USM-style conformer), as ONNX.

The ``gemma4`` build's ``audio/`` graph runs it (:mod:`.gemma4`).

- Subsampling: two 3x3 stride-2 convolutions over ``[time, mel]`` (padding 1), each on
  input zeroed at padded frames and followed by a bias-free LayerNorm over channels and
  ReLU (the frame mask keeps every second frame); then a projection to ``hidden_size``.
- Conformer layers: half-step feed-forward, local self-attention, a light convolution
  (GLU, causal depthwise conv), half-step feed-forward, RMS norm; every linear but the
  relative-position one may clamp its input and output (``use_clipped_linears``).
- transformers' block-local attention is written as a banded full one: query ``i`` sees
  the real frames ``j`` with ``0 <= i - j < attention_context_left - 1`` or
  ``0 < j - i < attention_context_right`` (its window), its logits ``q . k + q . r[s]`` soft-capped, where ``r`` are
  the projected sinusoids at distances ``context // 2 - s`` for
  ``s = j - i + attention_context_left - 1`` (zero where ``s`` is past the table), what
  transformers' relative shift gives inside each block's context.
- The output projection (``output_proj``) ends it; padded frames' states are not
  meaningful (transformers drops them too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear, RMSNorm, get_activation
from mobius.errors import ConfigError
from mobius_vision.models.gemma4_vision import Gemma4ClippableLinear

#: transformers' Gemma4RMSNorm default, which most of the encoder's norms keep.
DEFAULT_EPS = 1e-6


@dataclass
class Gemma4AudioConfig:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    hidden_act: str
    subsampling_conv_channels: tuple[int, int]
    conv_kernel_size: int
    residual_weight: float
    attention_chunk_size: int
    attention_context_left: int
    attention_context_right: int
    attention_logit_cap: float
    attention_invalid_logits_value: float
    use_clipped_linears: bool
    rms_norm_eps: float
    gradient_clipping: float
    output_proj_dims: int

    @classmethod
    def from_hf(cls, hf_config: Any) -> Gemma4AudioConfig:
        sizes = {
            name: getattr(hf_config, name)
            for name in (
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "conv_kernel_size",
                "attention_chunk_size",
                "attention_context_left",
                "output_proj_dims",
            )
        }
        right = hf_config.attention_context_right
        channels = tuple(hf_config.subsampling_conv_channels)
        for name, value in [*sizes.items(), ("attention_context_right", right + 1)]:
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"gemma4_audio: {name} {value!r} is not a size")
        if len(channels) != 2 or not all(isinstance(c, int) and c > 0 for c in channels):
            raise ConfigError(f"gemma4_audio: subsampling_conv_channels {channels!r}")
        if sizes["hidden_size"] % sizes["num_attention_heads"]:
            raise ConfigError("gemma4_audio: hidden_size is not a multiple of the heads")
        return cls(
            **sizes,
            hidden_act=hf_config.hidden_act,
            subsampling_conv_channels=channels,
            residual_weight=float(hf_config.residual_weight),
            attention_context_right=right,
            attention_logit_cap=float(hf_config.attention_logit_cap),
            attention_invalid_logits_value=float(hf_config.attention_invalid_logits_value),
            use_clipped_linears=bool(hf_config.use_clipped_linears),
            rms_norm_eps=float(hf_config.rms_norm_eps),
            gradient_clipping=float(hf_config.gradient_clipping),
        )

    @property
    def context_size(self) -> int:
        left, right = self.attention_context_left - 1, self.attention_context_right
        return self.attention_chunk_size + left + right


def _f32(value: float) -> ir.Tensor:
    return ir.tensor(np.array(value, np.float32))


def _clamp(op, x, bound: float):
    """transformers' "gradient clipping" of the states, to ``[-bound, bound]``."""
    low, high = (op.CastLike(op.Constant(value=_f32(v)), x) for v in (-bound, bound))
    return op.Clip(x, low, high)


def relative_sinusoids(config: Gemma4AudioConfig) -> np.ndarray:
    """``[context // 2 + 1, hidden]``: ``[sin, cos]`` of distances ``context // 2`` down to 0."""
    count = config.hidden_size // 2
    increment = math.log(10000.0) / max(count - 1, 1)
    inv_timescales = np.exp(np.arange(count, dtype=np.float32) * np.float32(-increment))
    distances = np.arange(config.context_size // 2, -1, -1, dtype=np.float32)[:, None]
    scaled = (distances * inv_timescales[None, :]).astype(np.float32)
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=-1).astype(np.float32)


class Gemma4AudioSubSampleConvProjectionLayer(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, eps: float) -> None:
        super().__init__()
        self.conv = _StridedConv2d(out_channels, in_channels)
        self.norm = LayerNorm(out_channels, eps, bias=False)

    def forward(self, op, x, valid):
        """``x [batch, channels, time, mel]``, ``valid [batch, time]`` bool."""
        x = op.Mul(x, op.CastLike(op.Unsqueeze(valid, [1, 3]), x))
        x = self.conv(op, x)
        x = self.norm(op, op.Transpose(x, perm=[0, 2, 3, 1]))
        x = op.Transpose(op.Relu(x), perm=[0, 3, 1, 2])
        return x, op.Slice(valid, [0], [1 << 62], [1], [2])  # every second frame


class _StridedConv2d(nn.Module):
    """A bias-free 3x3 convolution of stride 2, padding 1 (HF ``nn.Conv2d``)."""

    def __init__(self, out_channels: int, in_channels: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([out_channels, in_channels, 3, 3])

    def forward(self, op, x):
        return op.Conv(x, self.weight, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])


class Gemma4AudioSubSampleConvProjection(nn.Module):
    def __init__(self, config: Gemma4AudioConfig) -> None:
        super().__init__()
        first, second = config.subsampling_conv_channels
        self.layer0 = Gemma4AudioSubSampleConvProjectionLayer(1, first, config.rms_norm_eps)
        self.layer1 = Gemma4AudioSubSampleConvProjectionLayer(first, second, config.rms_norm_eps)
        # transformers sizes the projection for mel bins == the first layer's channels
        self.input_proj_linear = Linear((first // 4) * second, config.hidden_size)

    def forward(self, op, features, valid):
        x, valid = self.layer0(op, op.Unsqueeze(features, [1]), valid)
        x, valid = self.layer1(op, x, valid)
        x = op.Transpose(x, perm=[0, 2, 3, 1])  # [batch, time, mel, channels]
        x = op.Reshape(x, op.Concat(op.Shape(x, start=0, end=2), [-1], axis=0))
        return self.input_proj_linear(op, x), valid


class Gemma4AudioFeedForward(nn.Module):
    def __init__(self, config: Gemma4AudioConfig) -> None:
        super().__init__()
        d, clip = config.hidden_size, config.use_clipped_linears
        self.ffw_layer_1 = Gemma4ClippableLinear(d, 4 * d, clip)
        self.ffw_layer_2 = Gemma4ClippableLinear(4 * d, d, clip)
        self.pre_layer_norm = RMSNorm(d, DEFAULT_EPS)
        self.post_layer_norm = RMSNorm(d, DEFAULT_EPS)
        self.act = get_activation(config.hidden_act)
        self.config = config

    def forward(self, op, x):
        bound = self.config.gradient_clipping
        h = self.pre_layer_norm(op, _clamp(op, x, bound))
        h = self.ffw_layer_2(op, self.act(op, self.ffw_layer_1(op, h)))
        h = self.post_layer_norm(op, _clamp(op, h, bound))
        scale = op.CastLike(op.Constant(value=_f32(self.config.residual_weight)), h)
        return op.Add(x, op.Mul(h, scale))


class Gemma4AudioLightConv1d(nn.Module):
    def __init__(self, config: Gemma4AudioConfig) -> None:
        super().__init__()
        d, clip = config.hidden_size, config.use_clipped_linears
        self.linear_start = Gemma4ClippableLinear(d, 2 * d, clip)
        self.linear_end = Gemma4ClippableLinear(d, d, clip)
        self.depthwise_conv1d = _CausalDepthwiseConv1d(d, config.conv_kernel_size)
        self.pre_layer_norm = RMSNorm(d, config.rms_norm_eps)
        self.conv_norm = RMSNorm(d, config.rms_norm_eps)
        self.act = get_activation(config.hidden_act)
        self.config = config

    def forward(self, op, x):
        h = self.linear_start(op, self.pre_layer_norm(op, x))
        value, gate = op.Split(h, num_outputs=2, axis=-1, _outputs=2)
        h = op.Mul(value, op.Sigmoid(gate))  # GLU
        h = op.Transpose(self.depthwise_conv1d(op, op.Transpose(h, perm=[0, 2, 1])), perm=[0, 2, 1])
        h = self.act(op, self.conv_norm(op, _clamp(op, h, self.config.gradient_clipping)))
        return op.Add(x, self.linear_end(op, h))


class _CausalDepthwiseConv1d(nn.Module):
    """A bias-free depthwise convolution over time that sees the past only (HF's, left-padded)."""

    def __init__(self, channels: int, kernel: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([channels, 1, kernel])
        self.channels, self.kernel = channels, kernel

    def forward(self, op, x):  # [batch, channels, time]
        k = self.kernel
        return op.Conv(x, self.weight, group=self.channels, kernel_shape=[k], pads=[k - 1, 0])


class Gemma4AudioAttention(nn.Module):
    """Banded local attention with relative positions (module docstring)."""

    def __init__(self, config: Gemma4AudioConfig) -> None:
        super().__init__()
        d, clip = config.hidden_size, config.use_clipped_linears
        self.heads = config.num_attention_heads
        self.head_dim = d // self.heads
        self.q_proj = Gemma4ClippableLinear(d, d, clip)
        self.k_proj = Gemma4ClippableLinear(d, d, clip)
        self.v_proj = Gemma4ClippableLinear(d, d, clip)
        self.post = Gemma4ClippableLinear(d, d, clip)
        self.relative_k_proj = Linear(d, d)
        self.per_dim_scale = nn.Parameter([self.head_dim])
        self.config = config

    def _heads(self, op, x):  # [batch, heads, time, head_dim]
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, self.heads, self.head_dim]))
        return op.Transpose(x, perm=[0, 2, 1, 3])

    def _relative_logits(self, op, q, sinusoids, length):
        """``[batch, heads, time, time]``: ``q_i . r[j - i + left - 1]``, zero past the table."""
        c = self.config
        table = op.CastLike(op.Constant(value=ir.tensor(sinusoids)), self.relative_k_proj.weight)
        r = op.Cast(self.relative_k_proj(op, table), to=ir.DataType.FLOAT)  # [P, d], as q
        r = op.Transpose(
            op.Reshape(r, op.Constant(value_ints=[-1, self.heads, self.head_dim])), perm=[1, 2, 0]
        )
        by_slot = op.MatMul(q, r)  # [batch, heads, time, P]
        by_slot = op.Pad(by_slot, op.Constant(value_ints=[0, 0, 0, 0, 0, 0, 0, 1]))  # slot P: 0
        positions = op.Range(op.Constant(value_int=0), length, op.Constant(value_int=1))
        slots = op.Add(
            op.Sub(op.Unsqueeze(positions, [0]), op.Unsqueeze(positions, [1])),
            op.Constant(value_int=c.attention_context_left - 1),
        )  # [time (i), time (j)]
        table = len(sinusoids)
        outside = op.Or(op.Less(slots, 0), op.GreaterOrEqual(slots, table))
        slots = op.Where(outside, op.Constant(value_int=table), slots)
        shape = op.Concat(op.Shape(by_slot, start=0, end=3), op.Shape(slots, start=1), axis=0)
        return op.GatherElements(by_slot, op.Expand(slots, shape), axis=3)

    def forward(self, op, x, allowed, sinusoids):
        """``allowed [batch, 1, time, time]``: the key is real and in the query's band."""
        c = self.config
        softplus = op.Softplus(op.Cast(self.per_dim_scale, to=ir.DataType.FLOAT))
        q_scale = op.Mul(op.Constant(value=_f32(self.head_dim**-0.5 / math.log(2))), softplus)
        k_scale = op.Constant(value=_f32(math.log(1 + math.e) / math.log(2)))
        q = op.Mul(self._heads(op, op.Cast(self.q_proj(op, x), to=ir.DataType.FLOAT)), q_scale)
        k = op.Mul(self._heads(op, op.Cast(self.k_proj(op, x), to=ir.DataType.FLOAT)), k_scale)
        v = self._heads(op, op.Cast(self.v_proj(op, x), to=ir.DataType.FLOAT))
        length = op.Squeeze(op.Shape(x, start=1, end=2), [0])
        logits = op.Add(
            op.MatMul(q, op.Transpose(k, perm=[0, 1, 3, 2])),
            self._relative_logits(op, q, sinusoids, length),
        )
        cap = op.Constant(value=_f32(c.attention_logit_cap))
        logits = op.Mul(op.Tanh(op.Div(logits, cap)), cap)
        invalid = op.Constant(value=_f32(c.attention_invalid_logits_value))
        weights = op.Softmax(op.Where(allowed, logits, invalid), axis=-1)
        y = op.Transpose(op.MatMul(weights, v), perm=[0, 2, 1, 3])
        y = op.Reshape(y, op.Constant(value_ints=[0, 0, -1]))
        return self.post(op, op.CastLike(y, x))


class Gemma4AudioLayer(nn.Module):
    def __init__(self, config: Gemma4AudioConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.feed_forward1 = Gemma4AudioFeedForward(config)
        self.feed_forward2 = Gemma4AudioFeedForward(config)
        self.self_attn = Gemma4AudioAttention(config)
        self.lconv1d = Gemma4AudioLightConv1d(config)
        self.norm_pre_attn = RMSNorm(d, DEFAULT_EPS)
        self.norm_post_attn = RMSNorm(d, DEFAULT_EPS)
        self.norm_out = RMSNorm(d, DEFAULT_EPS)
        self.bound = config.gradient_clipping

    def forward(self, op, x, allowed, sinusoids):
        x = self.feed_forward1(op, x)
        h = self.self_attn(
            op, self.norm_pre_attn(op, _clamp(op, x, self.bound)), allowed, sinusoids
        )
        x = op.Add(x, self.norm_post_attn(op, _clamp(op, h, self.bound)))
        x = self.feed_forward2(op, self.lconv1d(op, x))
        return self.norm_out(op, _clamp(op, x, self.bound))


class Gemma4AudioEncoder(nn.Module):
    """HF ``Gemma4AudioModel``: ``(features [batch, frames, mel], valid [batch, frames] bool)``
    to ``(states [batch, frames / 4, output_proj_dims], valid [batch, frames / 4])``."""

    def __init__(self, config: Gemma4AudioConfig) -> None:
        super().__init__()
        self.config = config
        self.subsample_conv_projection = Gemma4AudioSubSampleConvProjection(config)
        self.layers = nn.ModuleList(
            [Gemma4AudioLayer(config) for _ in range(config.num_hidden_layers)]
        )
        self.output_proj = Linear(config.hidden_size, config.output_proj_dims, bias=True)
        self.sinusoids = relative_sinusoids(config)

    def _allowed(self, op, valid, length):
        """``[batch, 1, time, time]``: key ``j`` is real and in transformers' window,
        ``0 <= i - j < left - 1`` or ``0 < j - i < right``."""
        c = self.config
        positions = op.Range(op.Constant(value_int=0), length, op.Constant(value_int=1))
        behind = op.Sub(op.Unsqueeze(positions, [1]), op.Unsqueeze(positions, [0]))  # i - j
        band = op.And(
            op.Less(behind, op.Constant(value_int=c.attention_context_left - 1)),
            op.Greater(behind, op.Constant(value_int=-max(c.attention_context_right, 1))),
        )
        return op.And(op.Unsqueeze(band, [0, 1]), op.Unsqueeze(valid, [1, 2]))

    def forward(self, op, features, valid):
        x, valid = self.subsample_conv_projection(op, features, valid)
        allowed = self._allowed(op, valid, op.Squeeze(op.Shape(x, start=1, end=2), [0]))
        for layer in self.layers:
            x = layer(op, x, allowed, self.sinusoids)
        return self.output_proj(op, x), valid
