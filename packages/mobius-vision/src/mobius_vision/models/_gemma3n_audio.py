"""Gemma 3n's audio encoder (transformers' ``Gemma3nAudioEncoder``, a USM-style conformer), as ONNX.

The ``gemma3n`` build's ``audio/`` graph (:mod:`.gemma3n`), checked alone too.

- Subsampling: two 2-D convolutions over ``[time, mel]`` (time padded causally, mel by one
  each side), each followed by a *cumulative* group norm (statistics over all channels
  and mel bins of the frames so far) and ReLU; then a projection to ``hidden_size``.
- Conformer blocks: half-step feed-forward, local self-attention, a light convolution
  (GLU, causal depthwise conv), half-step feed-forward, RMS norm.
- The attention is transformers' block-local attention written as a banded full one:
  query ``q`` sees keys ``k`` with ``q - left <= k <= q + right`` (``left =
  conf_attention_context_left - 1``), its logits ``q . k + q . r[q - k]`` (``r``: a projected
  sinusoid per relative distance) soft-capped; padded frames are never attended to.
- The output keeps every ``conf_reduction_factor``-th frame; padded frames are zeros.
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

#: transformers' Gemma3nRMSNorm default, which most of the encoder's norms keep.
DEFAULT_EPS = 1e-6


@dataclass
class Gemma3nAudioConfig:
    hidden_size: int
    input_feat_size: int
    num_heads: int
    num_layers: int
    chunk_size: int
    context_left: int
    context_right: int
    logit_cap: float
    conv_kernel_size: int
    reduction_factor: int
    residual_weight: float
    sscp_channels: tuple[int, int]
    sscp_kernels: tuple[tuple[int, int], tuple[int, int]]
    sscp_strides: tuple[tuple[int, int], tuple[int, int]]
    sscp_eps: float
    gradient_clipping: float
    eps: float

    @classmethod
    def from_hf(cls, audio: Any) -> Gemma3nAudioConfig:
        """Read transformers' ``Gemma3nAudioConfig``."""
        config = cls(
            hidden_size=audio.hidden_size,
            input_feat_size=audio.input_feat_size,
            num_heads=audio.conf_num_attention_heads,
            num_layers=audio.conf_num_hidden_layers,
            chunk_size=audio.conf_attention_chunk_size,
            context_left=audio.conf_attention_context_left,
            context_right=audio.conf_attention_context_right,
            logit_cap=float(audio.conf_attention_logit_cap),
            conv_kernel_size=audio.conf_conv_kernel_size,
            reduction_factor=audio.conf_reduction_factor,
            residual_weight=float(audio.conf_residual_weight),
            sscp_channels=tuple(audio.sscp_conv_channel_size),
            sscp_kernels=tuple(tuple(k) for k in audio.sscp_conv_kernel_size),
            sscp_strides=tuple(tuple(s) for s in audio.sscp_conv_stride_size),
            sscp_eps=float(audio.sscp_conv_group_norm_eps),
            gradient_clipping=float(audio.gradient_clipping),
            eps=float(audio.rms_norm_eps),
        )
        if config.hidden_size % config.num_heads:
            raise ConfigError("gemma3n: audio hidden_size is not a multiple of its heads")
        if len(config.sscp_channels) != 2:
            raise ConfigError("gemma3n: the audio subsampling has two convolutions")
        return config


def _like(op, value, x):
    """``value`` rounded to float32 (as transformers' buffers), in ``x``'s dtype."""
    return op.CastLike(op.Constant(value=ir.tensor(np.asarray(value, dtype=np.float32))), x)


def _clip(op, x, limit: float):
    return op.Clip(x, _like(op, -limit, x), _like(op, limit, x))


class SSCPConvBlock(nn.Module):
    """Conv (time padded at the end, mel by one each side), cumulative group norm, ReLU."""

    def __init__(self, cin: int, cout: int, kernel, stride, eps: float) -> None:
        super().__init__()
        self.conv = _Conv(cin, cout, kernel, stride)
        self.norm = _CumulativeGroupNorm(cout, eps)
        self.pads = [0, 1, kernel[0] - 1, 1]  # time begin, mel begin, time end, mel end

    def forward(self, op, x):
        return op.Relu(self.norm(op, self.conv(op, x, self.pads)))


class _Conv(nn.Module):
    def __init__(self, cin: int, cout: int, kernel, stride) -> None:
        super().__init__()
        self.weight = nn.Parameter([cout, cin, *kernel])
        self.kernel, self.stride = list(kernel), list(stride)

    def forward(self, op, x, pads):
        return op.Conv(x, self.weight, kernel_shape=self.kernel, strides=self.stride, pads=pads)


class _CumulativeGroupNorm(nn.Module):
    """``[batch, channels, time, mel]`` normalised by the mean and variance of all values of
    frames ``0..t`` (as running sums over time), scaled per channel."""

    def __init__(self, channels: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter([channels])
        self.eps = eps

    def forward(self, op, x):
        axes = [1, 3]  # channels and mel bins
        time = op.Shape(x, start=2, end=3)
        frames = op.CastLike(
            op.Range(op.Constant(value_int=1), op.Add(op.Squeeze(time), 1), 1), x
        )  # [time]: 1, 2, ...
        per_frame = op.CastLike(
            op.ReduceProd(op.Concat(op.Shape(x, start=1, end=2), op.Shape(x, start=3), axis=0)),
            x,
        )
        count = op.Unsqueeze(op.Mul(frames, per_frame), [0, 1, 3])  # [1, 1, time, 1]
        mean = op.Div(op.CumSum(op.ReduceSum(x, axes, keepdims=1), 2), count)
        centered = op.Sub(x, mean)
        square_sums = op.ReduceSum(op.Mul(centered, centered), axes, keepdims=1)
        variance = op.Div(op.CumSum(square_sums, 2), count)
        x = op.Mul(centered, op.Pow(op.Add(variance, self.eps), -0.5))
        return op.Mul(x, op.Unsqueeze(self.weight, [1, 2]))


class SubSampleConvProjection(nn.Module):
    def __init__(self, c: Gemma3nAudioConfig) -> None:
        super().__init__()
        (c0, c1), (k0, k1), (s0, s1) = c.sscp_channels, c.sscp_kernels, c.sscp_strides
        self.conv_0 = SSCPConvBlock(1, c0, k0, s0, c.sscp_eps)
        self.conv_1 = SSCPConvBlock(c0, c1, k1, s1, c.sscp_eps)
        mel = c.input_feat_size
        for kernel, stride in ((k0, s0), (k1, s1)):
            mel = (mel + 2 - kernel[1]) // stride[1] + 1
        self.input_proj_linear = Linear(c1 * mel, c.hidden_size, bias=False)

    def forward(self, op, features):  # [batch, frames, mel]
        x = self.conv_1(op, self.conv_0(op, op.Unsqueeze(features, [1])))
        x = op.Transpose(x, perm=[0, 2, 3, 1])  # [batch, time, mel, channels]
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, -1]))
        return self.input_proj_linear(op, x)


class RelativePositionEmbedding(nn.Module):
    """``pos_proj`` of sinusoids of the relative distances ``left, left - 1, ..., -right``."""

    def __init__(self, c: Gemma3nAudioConfig) -> None:
        super().__init__()
        self.pos_proj = Linear(c.hidden_size, c.hidden_size, bias=False)
        left, right = max(0, c.context_left - 1), c.context_right
        distances = np.arange(left, -right - 1, -1, dtype=np.float32)[:, None]
        count = c.hidden_size // 2
        step = math.log(1.0e4) / max(count - 1, 1)
        inverse = np.exp(np.arange(count, dtype=np.float32) * np.float32(-step))
        scaled = distances * inverse[None, :]
        self.signal = np.concatenate([np.sin(scaled), np.cos(scaled)], axis=-1)

    def forward(self, op, like):  # [distances, hidden], in ``like``'s dtype
        return self.pos_proj(op, _like(op, self.signal, like))


class Gemma3nAudioAttention(nn.Module):
    def __init__(self, c: Gemma3nAudioConfig) -> None:
        super().__init__()
        hidden = c.hidden_size
        self.relative_position_embedding = RelativePositionEmbedding(c)
        self.per_dim_scale = nn.Parameter([hidden // c.num_heads])
        self.q_proj = Linear(hidden, hidden, bias=False)
        self.k_proj = Linear(hidden, hidden, bias=False)
        self.v_proj = Linear(hidden, hidden, bias=False)
        self.heads, self.head_dim = c.num_heads, hidden // c.num_heads
        self.left, self.right = max(0, c.context_left - 1), c.context_right
        self.cap = c.logit_cap
        # head_dim^-0.5 / softplus(0), in float32 as transformers' buffer
        softplus_zero = np.log1p(np.exp(np.float32(0.0))).astype(np.float32)
        self.q_scale = np.float32(self.head_dim**-0.5) * (np.float32(1.0) / softplus_zero)

    def heads_first(self, op, x):  # [batch, time, hidden] -> [batch, heads, time, head_dim]
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, self.heads, self.head_dim]))
        return op.Transpose(x, perm=[0, 2, 1, 3])

    def forward(self, op, x, valid):
        """``x`` [batch, time, hidden], ``valid`` bool [batch, time] -> [batch, time, hidden]."""
        scale = op.Mul(_like(op, self.q_scale, x), op.Softplus(self.per_dim_scale))
        q = op.Mul(self.heads_first(op, self.q_proj(op, x)), scale)
        k = self.heads_first(op, self.k_proj(op, x))
        v = self.heads_first(op, self.v_proj(op, x))
        content = op.MatMul(q, op.Transpose(k, perm=[0, 1, 3, 2]))  # [b, heads, q, k]
        relative = self.relative_position_embedding(op, x)  # [distances, hidden]
        relative = op.Transpose(
            op.Reshape(relative, op.Constant(value_ints=[0, self.heads, self.head_dim])),
            perm=[1, 2, 0],
        )  # [heads, head_dim, distances]
        by_distance = op.MatMul(q, relative)  # [b, heads, q, distances]
        # distance index of (q, k): left - (q - k), clipped into the table (outside the band
        # the logits are masked anyway)
        time = op.Shape(x, start=1, end=2)
        positions = op.Range(op.Constant(value_int=0), op.Squeeze(time), 1)
        offsets = op.Sub(op.Unsqueeze(positions, [1]), op.Unsqueeze(positions, [0]))  # q - k
        band = op.And(op.LessOrEqual(offsets, self.left), op.GreaterOrEqual(offsets, -self.right))
        index = op.Clip(
            op.Sub(op.Constant(value_int=self.left), offsets),
            op.Constant(value_int=0),
            op.Constant(value_int=self.left + self.right),
        )
        index = op.Expand(index, op.Shape(content))
        logits = op.Add(content, op.GatherElements(by_distance, index, axis=3))
        cap = _like(op, self.cap, x)
        logits = op.Mul(op.Tanh(op.Div(logits, cap)), cap)
        allowed = op.And(band, op.Unsqueeze(valid, [1, 2]))  # [b, 1, q, k]
        lowest = _like(op, np.finfo(np.float32).min, x)
        probabilities = op.Softmax(op.Where(allowed, logits, lowest), axis=-1)
        out = op.Transpose(op.MatMul(probabilities, v), perm=[0, 2, 1, 3])
        return op.Reshape(out, op.Constant(value_ints=[0, 0, -1]))


class ConformerAttention(nn.Module):
    def __init__(self, c: Gemma3nAudioConfig) -> None:
        super().__init__()
        self.pre_attn_norm = RMSNorm(c.hidden_size, DEFAULT_EPS)
        self.attn = Gemma3nAudioAttention(c)
        self.post = Linear(c.hidden_size, c.hidden_size, bias=False)
        self.post_norm = RMSNorm(c.hidden_size, DEFAULT_EPS)
        self.clip = c.gradient_clipping

    def forward(self, op, x, valid):
        y = self.attn(op, self.pre_attn_norm(op, _clip(op, x, self.clip)), valid)
        return op.Add(x, self.post_norm(op, _clip(op, self.post(op, y), self.clip)))


class ConformerFeedForward(nn.Module):
    def __init__(self, c: Gemma3nAudioConfig) -> None:
        super().__init__()
        self.pre_layer_norm = RMSNorm(c.hidden_size, DEFAULT_EPS)
        self.ffw_layer_1 = Linear(c.hidden_size, c.hidden_size * 4, bias=False)
        self.ffw_layer_2 = Linear(c.hidden_size * 4, c.hidden_size, bias=False)
        self.post_layer_norm = RMSNorm(c.hidden_size, DEFAULT_EPS)
        self.clip, self.weight = c.gradient_clipping, c.residual_weight

    def forward(self, op, x):
        y = self.ffw_layer_1(op, self.pre_layer_norm(op, _clip(op, x, self.clip)))
        y = self.ffw_layer_2(op, op.Mul(y, op.Sigmoid(y)))
        y = self.post_layer_norm(op, _clip(op, y, self.clip))
        return op.Add(x, op.Mul(y, _like(op, self.weight, y)))


class ConformerLightConv1d(nn.Module):
    def __init__(self, c: Gemma3nAudioConfig) -> None:
        super().__init__()
        hidden = c.hidden_size
        self.pre_layer_norm = RMSNorm(hidden, c.eps)
        self.linear_start = Linear(hidden, hidden * 2, bias=False)
        self.depthwise_conv1d = _DepthwiseCausalConv1d(hidden, c.conv_kernel_size)
        self.conv_norm = RMSNorm(hidden, c.eps)
        self.linear_end = Linear(hidden, hidden, bias=False)
        self.clip = c.gradient_clipping

    def forward(self, op, x):
        y = self.linear_start(op, self.pre_layer_norm(op, x))
        value, gate = op.Split(y, num_outputs=2, axis=-1, _outputs=2)
        y = op.Mul(value, op.Sigmoid(gate))
        y = op.Transpose(self.depthwise_conv1d(op, op.Transpose(y, perm=[0, 2, 1])), perm=[0, 2, 1])
        y = self.conv_norm(op, _clip(op, y, self.clip))
        y = self.linear_end(op, op.Mul(y, op.Sigmoid(y)))
        return op.Add(y, x)


class _DepthwiseCausalConv1d(nn.Module):
    def __init__(self, channels: int, kernel: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([channels, 1, kernel])
        self.channels, self.kernel = channels, kernel

    def forward(self, op, x):  # [batch, channels, time], padded before the first frame
        return op.Conv(
            x,
            self.weight,
            group=self.channels,
            kernel_shape=[self.kernel],
            pads=[self.kernel - 1, 0],
        )


class ConformerBlock(nn.Module):
    def __init__(self, c: Gemma3nAudioConfig) -> None:
        super().__init__()
        self.ffw_layer_start = ConformerFeedForward(c)
        self.attention = ConformerAttention(c)
        self.lconv1d = ConformerLightConv1d(c)
        self.ffw_layer_end = ConformerFeedForward(c)
        self.norm = RMSNorm(c.hidden_size, DEFAULT_EPS)
        self.clip = c.gradient_clipping

    def forward(self, op, x, valid):
        x = self.attention(op, self.ffw_layer_start(op, x), valid)
        x = op.Mul(x, op.Unsqueeze(op.CastLike(valid, x), [-1]))
        x = self.ffw_layer_end(op, self.lconv1d(op, x))
        return self.norm(op, _clip(op, x, self.clip))


class Gemma3nAudioEncoder(nn.Module):
    """``input_features`` [batch, frames, mel], ``valid`` bool [batch, frames] (the processor's
    ``input_features_mask``) -> encodings [batch, tokens, hidden] (zeros on padding) and their
    ``valid`` [batch, tokens]."""

    def __init__(self, config: Gemma3nAudioConfig) -> None:
        super().__init__()
        self.subsample_conv_projection = SubSampleConvProjection(config)
        self.conformer = nn.ModuleList([ConformerBlock(config) for _ in range(config.num_layers)])
        self.config = config

    def forward(self, op, features, valid):
        c = self.config
        x = self.subsample_conv_projection(op, features)
        # each subsampled frame is valid as the input frame it starts at
        stride = math.prod(s[0] for s in c.sscp_strides)
        frames = op.Shape(valid, start=1, end=2)
        starts = op.Mul(
            op.Range(op.Constant(value_int=0), op.Squeeze(op.Shape(x, start=1, end=2)), 1), stride
        )
        starts = op.Min(starts, op.Sub(op.Squeeze(frames), 1))
        valid = op.Gather(valid, starts, axis=1)
        for block in self.conformer:
            x = block(op, x, valid)
        r = c.reduction_factor
        if r > 1:
            big = op.Constant(value_ints=[1 << 62])
            start, axis, step = (op.Constant(value_ints=[v]) for v in (0, 1, r))
            x = op.Slice(x, start, big, axis, step)
            valid = op.Slice(valid, start, big, axis, step)
        x = op.Mul(x, op.Unsqueeze(op.CastLike(valid, x), [-1]))
        return x, valid
