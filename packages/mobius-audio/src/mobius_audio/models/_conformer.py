"""FastConformer: the encoder of NVIDIA's Parakeet (NeMo) models, as shared pieces.

Each piece takes explicit arguments, not a config, so the Parakeet CTC, RNN-T and
TDT models (and any other FastConformer) build the same encoder. Submodules are
named after transformers' ``ParakeetEncoder`` checkpoint keys.

- :class:`DepthwiseStridingSubsampling` ("dw_striding"): the log-mel frames as a
  one-channel image ``[batch, 1, frames, mels]`` through a strided conv, then
  ``num_layers - 1`` pairs of a strided depthwise and a pointwise conv, each
  followed by ReLU, channels and mels flattened and projected to ``hidden``. After
  every conv the frames past each row's length are zeroed; a strided conv takes
  the length to ``(length + 2 * pad - kernel) // stride + 1``.
- :class:`RelPositionAttention`: Transformer-XL relative positions: the query plus
  ``bias_u`` scores the keys, the query plus ``bias_v`` scores the projected
  (``relative_k_proj``) sinusoids of the distances, skewed into place.
- :class:`ConformerConvolution`: pointwise conv + GLU, padded frames zeroed,
  depthwise conv, BatchNorm (running statistics), activation, pointwise conv.
- :class:`ConformerBlock`: macaron style: ``x + ff1(norm(x)) / 2``, attention,
  the conv module, ``x + ff2(norm(x)) / 2``, each with its residual, then a
  LayerNorm.

Padding, as transformers masks it: an attention score is kept where both the
query and the key frame are real, the others set to the lowest float *before*
the content score is added, so a padded query attends uniformly to every frame
(its output is not read by any real frame: the conv module zeroes it first).
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import BatchNorm, Conv2d, LayerNorm, Linear, get_activation
from mobius_audio.models.wav2vec2 import Conv1d
from mobius_audio.models.wav2vec2_conformer import RelPositionalEmbedding, _const, rel_shift


def length_mask(op, lengths, like):
    """bool ``[batch, frames]``: frame ``t`` of ``like [batch, frames, ...]`` is below the row's length.

    ``lengths`` is int64 ``[batch, 1]``.
    """
    frames = op.Squeeze(op.Shape(like, start=1, end=2), [0])
    positions = op.Range(op.Constant(value_int=0), frames, op.Constant(value_int=1))
    return op.Less(op.Unsqueeze(positions, [0]), lengths)


class _ReLU(nn.Module):
    """A parameterless slot, so the convs keep transformers' ``layers.{i}`` indices."""

    def forward(self, op, x):
        return op.Relu(x)


class DepthwiseStridingSubsampling(nn.Module):
    """``[batch, frames, mels]`` and lengths ``[batch, 1]`` -> ``[batch, frames', hidden]`` and lengths."""

    def __init__(
        self, mels: int, channels: int, hidden: int, kernel: int, stride: int, num_layers: int
    ) -> None:
        super().__init__()
        self.pad, self.kernel = (kernel - 1) // 2, kernel
        layers = [Conv2d(1, channels, kernel, stride, self.pad), _ReLU()]
        self.strides = [stride, None]  # per slot: the conv's stride, None for ReLU
        for _ in range(num_layers - 1):
            depthwise = Conv2d(channels, channels, kernel, stride, self.pad, groups=channels)
            layers += [depthwise, Conv2d(channels, channels, 1), _ReLU()]
            self.strides += [stride, 1, None]
        self.layers = nn.ModuleList(layers)
        self.out_mels = self.output_size(mels, kernel, stride, num_layers)
        self.linear = Linear(channels * self.out_mels, hidden, True)

    @staticmethod
    def output_size(size: int, kernel: int, stride: int, num_layers: int) -> int:
        """What ``num_layers`` strided convs (padding ``(kernel - 1) // 2``) make of ``size``."""
        for _ in range(num_layers):
            size = (size + (kernel - 1) // 2 * 2 - kernel) // stride + 1
        return size

    def forward(self, op, features, lengths):
        x = op.Unsqueeze(features, [1])  # [batch, 1, frames, mels]
        for layer, stride in zip(self.layers, self.strides, strict=True):
            x = layer(op, x)
            if stride is None:
                continue
            if stride != 1:  # a floor, as torch's: an empty row stays empty
                reach = op.Cast(op.Add(lengths, 2 * self.pad - self.kernel), to=ir.DataType.FLOAT)
                steps = op.Floor(op.Div(reach, op.Constant(value_float=float(stride))))
                lengths = op.Add(op.Cast(steps, to=ir.DataType.INT64), 1)
            frames = op.Transpose(x, perm=[0, 2, 1, 3])  # [batch, frames, channels, mels]
            real = op.CastLike(length_mask(op, lengths, frames), x)
            x = op.Mul(x, op.Unsqueeze(real, [1, 3]))
        x = op.Transpose(x, perm=[0, 2, 1, 3])  # [batch, frames', channels, mels']
        return self.linear(op, op.Reshape(x, [0, 0, -1])), lengths


class RelPositionAttention(nn.Module):
    """Multi-head self-attention with Transformer-XL relative positions (``bias_u``, ``bias_v``)."""

    def __init__(self, hidden: int, heads: int, bias: bool) -> None:
        super().__init__()
        self.q_proj, self.k_proj = Linear(hidden, hidden, bias), Linear(hidden, hidden, bias)
        self.v_proj, self.o_proj = Linear(hidden, hidden, bias), Linear(hidden, hidden, bias)
        self.relative_k_proj = Linear(hidden, hidden, False)
        self.num_heads, self.head_dim = heads, hidden // heads
        self.bias_u = nn.Parameter([heads, self.head_dim])  # content bias
        self.bias_v = nn.Parameter([heads, self.head_dim])  # position bias
        self.scale = self.head_dim**-0.5

    def heads(self, op, x):  # [batch, frames, hidden] -> [batch, heads, frames, head_dim]
        return op.Transpose(op.Reshape(x, [0, 0, self.num_heads, -1]), perm=[0, 2, 1, 3])

    def forward(self, op, x, positions, pair_mask):
        """``x [b, f, hidden]``, ``positions [2f-1, hidden]``, ``pair_mask`` bool ``[b, 1, f, f]``."""
        q, k, v = self.q_proj(op, x), self.k_proj(op, x), self.v_proj(op, x)
        pos = self.heads(op, op.Unsqueeze(self.relative_k_proj(op, positions), [0]))
        with_v = self.heads(op, op.Add(q, op.Reshape(self.bias_v, [-1])))
        scores = op.MatMul(with_v, op.Transpose(pos, perm=[0, 1, 3, 2]))  # [b, h, f, 2f-1]
        scores = rel_shift(op, scores, op.Shape(x, start=1, end=2))
        scores = op.Mul(scores, _const(op, self.scale, scores))
        lowest = _const(op, float(np.finfo(np.float32).min), scores)
        bias = op.Where(pair_mask, scores, lowest)
        with_u = self.heads(op, op.Add(q, op.Reshape(self.bias_u, [-1])))
        # Written out, not the Attention op: for a padded query (every score the lowest
        # float) ONNX Runtime's op does not give torch's uniform softmax (measured).
        content = op.MatMul(with_u, op.Transpose(self.heads(op, k), perm=[0, 1, 3, 2]))
        weights = op.Softmax(
            op.Add(op.Mul(content, _const(op, self.scale, content)), bias), axis=-1
        )
        out = op.Transpose(op.MatMul(weights, self.heads(op, v)), perm=[0, 2, 1, 3])
        return self.o_proj(op, op.Reshape(out, [0, 0, -1]))


class ConformerFeedForward(nn.Module):
    def __init__(self, hidden: int, intermediate: int, activation: str, bias: bool) -> None:
        super().__init__()
        self.linear1 = Linear(hidden, intermediate, bias)
        self.linear2 = Linear(intermediate, hidden, bias)
        self.act = get_activation(activation)

    def forward(self, op, x):
        return self.linear2(op, self.act(op, self.linear1(op, x)))


class ConformerConvolution(nn.Module):
    """Pointwise conv + GLU, depthwise conv (odd ``kernel``, same length), BatchNorm, pointwise conv."""

    def __init__(self, channels: int, kernel: int, activation: str, bias: bool) -> None:
        super().__init__()
        self.pointwise_conv1 = Conv1d(channels, 2 * channels, 1, bias=bias)
        pad = (kernel - 1) // 2
        self.depthwise_conv = Conv1d(
            channels, channels, kernel, bias=bias, pad=pad, groups=channels
        )
        self.norm = BatchNorm(channels)
        self.pointwise_conv2 = Conv1d(channels, channels, 1, bias=bias)
        self.act = get_activation(activation)

    def forward(self, op, x, frame_mask):
        x = self.pointwise_conv1(op, op.Transpose(x, perm=[0, 2, 1]))  # [b, 2*channels, f]
        a, b = op.Split(x, axis=1, num_outputs=2, _outputs=2)
        x = op.Mul(a, op.Sigmoid(b))  # GLU
        x = op.Where(op.Unsqueeze(frame_mask, [1]), x, _const(op, 0.0, x))  # pads stay out
        x = self.act(op, self.norm(op, self.depthwise_conv(op, x)))
        return op.Transpose(self.pointwise_conv2(op, x), perm=[0, 2, 1])


class ConformerBlock(nn.Module):
    """Half feed-forward, attention, conv module, half feed-forward, LayerNorm."""

    def __init__(
        self,
        hidden: int,
        intermediate: int,
        heads: int,
        conv_kernel: int,
        activation: str,
        attention_bias: bool,
        conv_bias: bool,
    ) -> None:
        super().__init__()
        self.feed_forward1 = ConformerFeedForward(hidden, intermediate, activation, attention_bias)
        self.self_attn = RelPositionAttention(hidden, heads, attention_bias)
        self.conv = ConformerConvolution(hidden, conv_kernel, activation, conv_bias)
        self.feed_forward2 = ConformerFeedForward(hidden, intermediate, activation, attention_bias)
        self.norm_feed_forward1 = LayerNorm(hidden)
        self.norm_self_att = LayerNorm(hidden)
        self.norm_conv = LayerNorm(hidden)
        self.norm_feed_forward2 = LayerNorm(hidden)
        self.norm_out = LayerNorm(hidden)

    def forward(self, op, x, positions, pair_mask, frame_mask):
        half = _const(op, 0.5, x)
        x = op.Add(x, op.Mul(self.feed_forward1(op, self.norm_feed_forward1(op, x)), half))
        x = op.Add(x, self.self_attn(op, self.norm_self_att(op, x), positions, pair_mask))
        x = op.Add(x, self.conv(op, self.norm_conv(op, x), frame_mask))
        x = op.Add(x, op.Mul(self.feed_forward2(op, self.norm_feed_forward2(op, x)), half))
        return self.norm_out(op, x)


class FastConformerEncoder(nn.Module):
    """Subsampling, scaling by ``sqrt(hidden)`` (``scale_input``), relative positions, the blocks.

    ``forward(op, input_features [b, frames, mels], attention_mask int64 [b, frames])``
    returns the states ``[b, frames', hidden]`` and their mask bool ``[b, frames']``.
    """

    def __init__(
        self,
        *,
        mels: int,
        hidden: int,
        intermediate: int,
        num_layers: int,
        heads: int,
        conv_kernel: int,
        activation: str,
        attention_bias: bool,
        conv_bias: bool,
        subsampling_channels: int,
        subsampling_kernel: int,
        subsampling_stride: int,
        subsampling_layers: int,
        scale_input: bool,
    ) -> None:
        super().__init__()
        self.subsampling = DepthwiseStridingSubsampling(
            mels,
            subsampling_channels,
            hidden,
            subsampling_kernel,
            subsampling_stride,
            subsampling_layers,
        )
        self.input_scale = math.sqrt(hidden) if scale_input else 1.0
        self.encode_positions = RelPositionalEmbedding(hidden)  # sinusoids: no weights
        block = (hidden, intermediate, heads, conv_kernel, activation, attention_bias, conv_bias)
        self.layers = nn.ModuleList([ConformerBlock(*block) for _ in range(num_layers)])

    def forward(self, op, input_features, attention_mask):
        lengths = op.ReduceSum(attention_mask, [1], keepdims=1)  # [batch, 1]
        x, lengths = self.subsampling(op, input_features, lengths)
        x = op.Mul(x, _const(op, self.input_scale, x))
        positions = self.encode_positions(op, x)
        frame_mask = length_mask(op, lengths, x)  # [batch, frames]
        pair_mask = op.And(op.Unsqueeze(frame_mask, [1, 3]), op.Unsqueeze(frame_mask, [1, 2]))
        for layer in self.layers:
            x = layer(op, x, positions, pair_mask, frame_mask)
        return x, frame_mask
