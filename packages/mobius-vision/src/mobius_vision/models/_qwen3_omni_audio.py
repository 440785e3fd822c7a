"""Qwen3-Omni's audio encoder: three stride-2 2-D convolutions per chunk, windowed attention.

transformers' ``Qwen3OmniMoeAudioEncoder`` cuts each clip's real frames into chunks of
``2 * n_window`` frames as Qwen2.5-Omni's does (:mod:`._qwen2_5_omni_audio`), pads them
with zeros to the longest chunk of the batch, and runs each as a ``[1, mel_bins,
frames]`` image through ``conv2d1..3`` (GELU after each); ``conv_out`` flattens channels
and frequency bins into the width, and each chunk's states get the sinusoid positions
from 0. The layers (whose key projection has a bias) attend within windows of
``n_window_infer / (2 * n_window)`` chunks of a clip; then ``ln_post``, ``proj1``, the
activation and ``proj2`` (no pooling).

The chunks are padded to the longest of the batch, not to ``2 * n_window``, as
transformers pads them: the convolutions do not mask their outputs, so a state at a
chunk's end reads the padding, which must be the same. A window of ``k`` chunks is what
transformers' ``cu_seqlens`` make of the states: every chunk but a clip's last has the
most states of the batch, so windows of ``k`` times that many states start at every
``k``-th chunk of a clip.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv2d, LayerNorm, Linear, get_activation
from mobius.errors import ConfigError
from mobius_vision.models._qwen2_5_omni_audio import (
    INT64,
    AudioEncoderLayer,
    Qwen2_5OmniAudioConfig,
    Qwen2_5OmniAudioEncoder,
    frames_in_chunk,
    int_scalar,
    real_states,
    same_group,
    sinusoid_positions,
)


def conv_length(length):
    """The length a kernel-3, stride-2, padding-1 convolution leaves of ``length`` (an int)."""
    return (length - 1) // 2 + 1


@dataclass
class Qwen3OmniMoeAudioConfig(Qwen2_5OmniAudioConfig):
    downsample_hidden_size: int = 480
    n_window_infer: int = 800

    @classmethod
    def from_hf(cls, hf: Any) -> Qwen3OmniMoeAudioConfig:
        config = super().from_hf(hf)
        fields = {}
        for name in ("downsample_hidden_size", "n_window_infer"):
            value = getattr(hf, name, None)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"audio_config.{name} is {value!r}, not a positive int")
            fields[name] = value
        if fields["n_window_infer"] % config.chunk_frames:
            raise ConfigError(
                f"audio_config.n_window_infer {fields['n_window_infer']} is not a multiple of "
                f"2 * n_window ({config.chunk_frames})"
            )
        return dataclasses.replace(config, **fields)

    @property
    def window_chunks(self) -> int:
        """The chunks of one attention window."""
        return self.n_window_infer // self.chunk_frames

    @property
    def frequency_bins(self) -> int:
        """The mel bins the three convolutions leave."""
        return conv_length(conv_length(conv_length(self.num_mel_bins)))


class Qwen3OmniMoeAudioEncoder(Qwen2_5OmniAudioEncoder):
    """``conv2d1..3``, ``conv_out``, ``layers``, ``ln_post``, ``proj1``, ``proj2`` (module docstring)."""

    def __init__(self, config: Qwen3OmniMoeAudioConfig) -> None:
        nn.Module.__init__(self)
        self.config = config
        d, h = config.d_model, config.downsample_hidden_size
        self.conv2d1 = Conv2d(1, h, 3, stride=2, padding=1)
        self.conv2d2 = Conv2d(h, h, 3, stride=2, padding=1)
        self.conv2d3 = Conv2d(h, h, 3, stride=2, padding=1)
        self.conv_out = Linear(h * config.frequency_bins, d, bias=False)
        layers = [AudioEncoderLayer(config, key_bias=True) for _ in range(config.encoder_layers)]
        self.layers = nn.ModuleList(layers)
        self.ln_post = LayerNorm(d, 1e-5)
        self.proj1 = Linear(d, d, bias=True)
        self.act = get_activation(config.activation_function)
        self.proj2 = Linear(d, config.output_dim, bias=True)
        states = conv_length(conv_length(conv_length(config.chunk_frames)))
        self.positions = sinusoid_positions(states, d)

    def forward(self, op, input_features, feature_attention_mask):
        lengths = op.ReduceSum(op.Cast(feature_attention_mask, to=INT64), [1], keepdims=0)
        chunked, chunk_frames, chunk_count = self.chunks(op, input_features, lengths)
        longest = op.Unsqueeze(op.ReduceMax(chunk_frames, keepdims=0), [0])
        chunked = op.Slice(
            chunked, op.Constant(value_ints=[0]), longest, [2]
        )  # as transformers pads
        x = op.Mul(chunked, frames_in_chunk(op, chunked, chunk_frames))
        x = op.Unsqueeze(x, [1])  # [chunks, 1, mel_bins, frames]
        for conv in (self.conv2d1, self.conv2d2, self.conv2d3):
            x = op.Gelu(conv(op, x))  # [chunks, h, bins, states]
        x = op.Transpose(x, perm=[0, 3, 1, 2])  # [chunks, states, h, bins]
        width = self.config.downsample_hidden_size * self.config.frequency_bins
        x = self.conv_out(op, op.Reshape(x, op.Constant(value_ints=[0, 0, width])))
        positions = op.Slice(
            op.Constant(value=ir.tensor(self.positions)),
            op.Constant(value_ints=[0]),
            op.Shape(x, start=1, end=2),
            [0],
        )
        x = op.Add(x, op.CastLike(positions, x))
        states = chunk_frames
        for _ in range(3):  # each chunk's real states: ceil(frames / 2), three times
            states = op.Div(op.Add(states, int_scalar(op, 1)), int_scalar(op, 2))
        x, chunk = real_states(op, x, states)
        # one window per window_chunks chunks of a clip: clip * chunk_count + window
        window = op.Div(op.Mod(chunk, chunk_count), int_scalar(op, self.config.window_chunks))
        clip_window = op.Add(op.Mul(op.Div(chunk, chunk_count), chunk_count), window)
        mask = same_group(op, clip_window)
        x = op.Unsqueeze(x, [0])
        for layer in self.layers:
            x = layer(op, x, mask)
        x = self.ln_post(op, op.Squeeze(x, [0]))
        return self.proj2(op, self.act(op, self.proj1(op, x)))  # [audio tokens, output_dim]
