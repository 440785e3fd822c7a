"""Qwen2.5-Omni's audio encoder: Whisper's layers over 2 x ``n_window``-frame chunks, pooled.

transformers' ``Qwen2_5OmniAudioEncoder`` takes each clip's real frames (the feature mask
is a prefix of ones), cuts them into chunks of ``2 * n_window`` frames (the last one
shorter), and runs every chunk through two convolutions (the second of stride 2) as
a batch padded with zeros, the first convolution's output zeroed past the chunk. Each
chunk's states get the sinusoid positions from 0; the layers attend within a chunk
only; then each clip's states are averaged in pairs (an odd last one dropped) and go
through ``ln_post`` and ``proj`` to the text decoder's width.

Here the padded frames are laid out as ``[clips, chunks, frames]`` (every clip with as
many chunks as the longest), so a chunk past a clip's end is all padding: its states are
dropped with the others past their chunk's length before the layers, which see the
real states of every chunk as one sequence under a mask that keeps each chunk to itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear, Seq2SeqAttention, get_activation
from mobius.errors import ConfigError

INT64 = ir.DataType.INT64


@dataclass
class Qwen2_5OmniAudioConfig:
    """The fields of transformers' ``Qwen2_5OmniAudioEncoderConfig`` the graph reads."""

    num_mel_bins: int
    d_model: int
    encoder_layers: int
    encoder_attention_heads: int
    encoder_ffn_dim: int
    activation_function: str
    n_window: int
    output_dim: int

    @classmethod
    def from_hf(cls, hf: Any) -> Qwen2_5OmniAudioConfig:
        fields = {}
        for name in (
            "num_mel_bins",
            "d_model",
            "encoder_layers",
            "encoder_attention_heads",
            "encoder_ffn_dim",
            "n_window",
            "output_dim",
        ):
            value = getattr(hf, name, None)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"audio_config.{name} is {value!r}, not a positive int")
            fields[name] = value
        if fields["d_model"] % fields["encoder_attention_heads"]:
            raise ConfigError(
                f"audio_config.d_model {fields['d_model']} is not a multiple of "
                f"encoder_attention_heads {fields['encoder_attention_heads']}"
            )
        if getattr(hf, "scale_embedding", False):
            raise ConfigError("audio_config.scale_embedding: transformers' encoder ignores it")
        act = getattr(hf, "activation_function", "gelu")
        if not isinstance(act, str):
            raise ConfigError(f"audio_config.activation_function is {act!r}, not a name")
        return cls(**fields, activation_function=act)

    @property
    def chunk_frames(self) -> int:
        """The frames of one chunk: ``2 * n_window``."""
        return 2 * self.n_window


def sinusoid_positions(length: int, channels: int) -> np.ndarray:
    """``[length, channels]`` float32: sines then cosines, timescales up to 10000, as
    transformers' ``SinusoidsPositionEmbedding`` computes them (in float32)."""
    if channels % 2 or channels < 4:
        raise ConfigError(f"audio_config.d_model {channels}: sinusoid positions need it even, >= 4")
    increment = np.log(10000) / (channels // 2 - 1)
    inv_timescales = np.exp((-increment * np.arange(channels // 2)).astype(np.float32))
    scaled = np.arange(length, dtype=np.float32)[:, None] * inv_timescales[None, :]
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1).astype(np.float32)


class Conv1d(nn.Module):
    """``Conv`` over ``[batch, channels, time]``, kernel 3 padded by 1 (``weight [out, in, 3]``)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        self.weight = nn.Parameter([out_channels, in_channels, 3])
        self.bias = nn.Parameter([out_channels])
        self.stride = stride

    def forward(self, op, x):
        return op.Conv(
            x, self.weight, self.bias, kernel_shape=[3], strides=[self.stride], pads=[1, 1]
        )


class AudioEncoderLayer(nn.Module):
    """Whisper's pre-norm encoder layer, attending under a mask (``key_bias``: Qwen3-Omni's
    key projection has one, Whisper's and Qwen2.5-Omni's none)."""

    def __init__(self, config: Qwen2_5OmniAudioConfig, key_bias: bool = False) -> None:
        super().__init__()
        d = config.d_model
        self.self_attn = Seq2SeqAttention(d, config.encoder_attention_heads, key_bias=key_bias)
        self.self_attn_layer_norm = LayerNorm(d, 1e-5)
        self.fc1 = Linear(d, config.encoder_ffn_dim, bias=True)
        self.fc2 = Linear(config.encoder_ffn_dim, d, bias=True)
        self.final_layer_norm = LayerNorm(d, 1e-5)
        self.act = get_activation(config.activation_function)

    def forward(self, op, x, mask):
        x = op.Add(x, self.self_attn(op, self.self_attn_layer_norm(op, x), mask))
        h = self.fc2(op, self.act(op, self.fc1(op, self.final_layer_norm(op, x))))
        return op.Add(x, h)


def real_states(op, x, states):
    """The states ``[tokens, d]`` of ``x [chunks, width, d]`` that each chunk's first ``states``
    ``[chunks]`` are, chunk by chunk, and the chunk of each ``[tokens]``."""
    width = op.Shape(x, start=1, end=2)
    state_index = _arange(op, op.Squeeze(width, [0]))
    real = op.Less(op.Unsqueeze(state_index, [0]), op.Unsqueeze(states, [1]))
    kept = op.Squeeze(op.NonZero(op.Reshape(real, op.Constant(value_ints=[-1]))), [0])
    rows = op.Reshape(x, op.Concat(op.Constant(value_ints=[-1]), op.Shape(x, start=2), axis=0))
    return op.Gather(rows, kept), op.Div(kept, op.Squeeze(width, [0]))


def frames_in_chunk(op, chunked, chunk_frames):
    """``[chunks, 1, frames]`` of ``chunked``'s type: 1 for each chunk's first ``chunk_frames``."""
    frame_index = _arange(op, op.Squeeze(op.Shape(chunked, start=-1), [0]))
    real = op.Less(op.Unsqueeze(frame_index, [0]), op.Unsqueeze(chunk_frames, [1]))
    return op.Unsqueeze(op.CastLike(real, chunked), [1])


def same_group(op, group):
    """``[1, 1, tokens, tokens]``: True where two tokens share their ``[tokens]`` group."""
    return op.Unsqueeze(op.Equal(op.Unsqueeze(group, [1]), op.Unsqueeze(group, [0])), [0, 1])


def int_scalar(op, value: int):
    """A scalar int64 constant."""
    return op.Constant(value=ir.tensor(np.array(value, np.int64)))


def _arange(op, count):
    """``[count]`` int64 from a scalar ``count``."""
    return op.Range(int_scalar(op, 0), count, int_scalar(op, 1))


class Qwen2_5OmniAudioEncoder(nn.Module):
    """``conv1``, ``conv2``, ``layers``, ``ln_post``, ``proj`` (see the module docstring)."""

    def __init__(self, config: Qwen2_5OmniAudioConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.conv1 = Conv1d(config.num_mel_bins, d)
        self.conv2 = Conv1d(d, d, stride=2)
        self.layers = nn.ModuleList(
            [AudioEncoderLayer(config) for _ in range(config.encoder_layers)]
        )
        self.ln_post = LayerNorm(d, 1e-5)
        self.proj = Linear(d, config.output_dim, bias=True)
        # a chunk of 2 * n_window frames leaves n_window states after the stride-2 conv
        self.positions = sinusoid_positions(config.n_window, d)

    def chunks(self, op, input_features, lengths):
        """The features as zero-padded chunks ``[clips * chunks, mels, chunk_frames]``, each
        chunk's real frames ``[clips * chunks]``, and the chunks of a clip (as many as the
        longest clip has: the frames past it, padding to the extractor's window, are cut)."""
        size = self.config.chunk_frames
        frames = op.ReduceMax(lengths, keepdims=0)
        features = op.Slice(
            input_features, op.Constant(value_ints=[0]), op.Unsqueeze(frames, [0]), [2]
        )
        chunk_count = op.Div(op.Add(frames, int_scalar(op, size - 1)), int_scalar(op, size))
        short = op.Sub(op.Mul(chunk_count, int_scalar(op, size)), frames)
        zero = op.Constant(value_ints=[0])
        pads = op.Concat(zero, zero, zero, zero, zero, op.Unsqueeze(short, [0]), axis=0)
        padded = op.Pad(features, pads)  # [clips, mels, chunks * size]
        mels = self.config.num_mel_bins
        chunked = op.Reshape(padded, op.Constant(value_ints=[0, mels, -1, size]))
        chunked = op.Transpose(chunked, perm=[0, 2, 1, 3])  # [clips, chunks, mels, size]
        chunked = op.Reshape(chunked, op.Constant(value_ints=[-1, mels, size]))
        starts = op.Mul(_arange(op, chunk_count), int_scalar(op, size))  # [chunks]
        real = op.Sub(op.Unsqueeze(lengths, [1]), op.Unsqueeze(starts, [0]))  # [clips, chunks]
        real = op.Clip(real, int_scalar(op, 0), int_scalar(op, size))
        return chunked, op.Reshape(real, op.Constant(value_ints=[-1])), chunk_count

    def forward(self, op, input_features, feature_attention_mask):
        lengths = op.ReduceSum(op.Cast(feature_attention_mask, to=INT64), [1], keepdims=0)
        chunked, chunk_frames, chunk_count = self.chunks(op, input_features, lengths)
        in_chunk = frames_in_chunk(op, chunked, chunk_frames)  # [chunks, 1, chunk_frames]
        x = op.Gelu(self.conv1(op, op.Mul(chunked, in_chunk)))
        x = op.Gelu(self.conv2(op, op.Mul(x, in_chunk)))  # [chunks, d, n_window]
        x = op.Transpose(x, perm=[0, 2, 1])  # [chunks, n_window, d]
        x = op.Add(x, op.CastLike(op.Constant(value=ir.tensor(self.positions)), x))
        # the states of each chunk's real frames: ceil(frames / 2) of its n_window
        states = op.Div(op.Add(chunk_frames, int_scalar(op, 1)), int_scalar(op, 2))  # [chunks]
        x, chunk = real_states(op, x, states)
        mask = same_group(op, chunk)
        x = op.Unsqueeze(x, [0])
        for layer in self.layers:
            x = layer(op, x, mask)
        x = self.pool_pairs(op, op.Squeeze(x, [0]), chunk, chunk_count, lengths)
        return self.proj(op, self.ln_post(op, x))  # [audio tokens, output_dim]

    @staticmethod
    def pool_pairs(op, x, chunk, chunk_count, lengths):
        """Each clip's states averaged in pairs, an odd last one dropped (``AvgPool1d(2, 2)``)."""
        tokens = op.Squeeze(op.Shape(x, start=0, end=1), [0])
        index = _arange(op, tokens)
        clip = op.Div(chunk, chunk_count)  # [tokens]: each state's clip
        per_clip = op.Div(
            op.Add(lengths, int_scalar(op, 1)), int_scalar(op, 2)
        )  # [clips]: its states
        first = op.Sub(op.CumSum(per_clip, int_scalar(op, 0)), per_clip)
        local = op.Sub(index, op.Gather(first, clip))  # the state's index in its clip
        has_pair = op.Less(op.Add(local, int_scalar(op, 1)), op.Gather(per_clip, clip))
        starts = op.And(op.Equal(op.Mod(local, int_scalar(op, 2)), int_scalar(op, 0)), has_pair)
        following = op.Min(op.Add(index, int_scalar(op, 1)), op.Sub(tokens, int_scalar(op, 1)))
        half = op.CastLike(op.Constant(value_float=0.5), x)
        pairs = op.Mul(op.Add(x, op.Gather(x, following)), half)
        return op.Gather(pairs, op.Squeeze(op.NonZero(starts), [0]))
