"""Phi-4-multimodal's audio encoder (``audio_embed``): a NeMo-style subsampler, conformer
blocks, and two projection pairs into the text decoder's width.

transformers' ``Phi4MultimodalAudioEmbedding`` over ``Phi4MultimodalAudioModel``:

- ``encoder.encoder_embedding``: ``(x - global_mean) * global_invstd`` per mel bin;
- ``encoder.embed`` (NeMo conv subsampling): the log-mels as a one-channel image
  ``[clips, 1, frames, mels]`` through a 3x3 stride-2 convolution, then
  ``log2(time_reduction) - 1`` pairs of a depthwise 3x3 stride-2 and a pointwise
  convolution (each followed by ``nemo_activation``), channels and mels flattened, and
  ``out`` to ``hidden_size``: ``ceil(frames / time_reduction)`` tokens a clip;
- the tokens cut into windows of at most 500 (the last padded with zeros; one window
  when a clip makes no more), each attended within itself;
- ``encoder.encoders``: conformer blocks, each ``x + ffn_in(x) / 2``, attention under a
  learned relative-position bias (``relative_attention_bias_layer``), the convolution
  module (GLU pointwise conv, causal depthwise conv, pointwise convs), ``x + ffn_out(x)
  / 2``, then LayerNorm;
- ``up_proj_for_speech -> gelu -> down_proj_for_speech`` when the prompt has no image,
  the ``..._for_vision_speech`` pair when it has one (``audio_projection_mode`` odd);
- each clip's first ``audio_sizes[i]`` tokens, clip after clip.

transformers adds its key mask to the scores as a number, not as ``-inf``: a real key
gets ``+1``, a padded one ``+0`` (``hs_mask`` is boolean, summed with the bias). The graph
does the same, so padded frames are seen, a little less, as in PyTorch; a clip real to
its last frame sees the padding of its last window as real (transformers' processor
gives a lone clip no mask, and its encoder masks nothing then). With
``chunk_size > 0`` a token sees its own chunk and ``left_chunk`` chunks before it (the
streaming mask), also as a ``+1``. ``feature_layer`` is read by no transformers code:
every block runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Conv2d,
    Embedding,
    LayerNorm,
    Linear,
    get_activation,
    module_scope,
)
from mobius.errors import ConfigError

INT64 = ir.DataType.INT64
#: transformers' window of tokens attended together (its ``max_seq_len``).
WINDOW = 500


@dataclass
class Phi4MultimodalAudioConfig:
    """The fields of transformers' ``Phi4MultimodalAudioConfig`` the graph reads."""

    hidden_size: int
    intermediate_size: int
    num_blocks: int
    num_attention_heads: int
    kernel_size: int
    input_size: int
    time_reduction: int
    bias_max_distance: int
    nemo_conv_channels: int
    depthwise_multiplier: int
    left_chunk: int
    chunk_size: int
    bias_symmetric: bool
    activation: str
    conv_activation: str
    conv_glu_type: str
    nemo_activation: str

    @classmethod
    def from_hf(cls, hf: Any) -> Phi4MultimodalAudioConfig:
        values = {}
        for field in fields(cls):
            value = getattr(hf, field.name, None)
            if field.type == "str":
                if not isinstance(value, str):
                    raise ConfigError(f"audio_config.{field.name} is {value!r}, not a name")
            elif field.type == "bool":
                if not isinstance(value, bool):
                    raise ConfigError(f"audio_config.{field.name} is {value!r}, not a bool")
            elif isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"audio_config.{field.name} is {value!r}, not an int")
            elif value < 1 and field.name not in ("chunk_size", "left_chunk"):
                raise ConfigError(f"audio_config.{field.name} is {value}, not positive")
            values[field.name] = value
        config = cls(**values)
        config.check(hf)
        return config

    def check(self, hf: Any) -> None:
        """Refuse what transformers' module could not run, or what the graph does not build."""
        hidden = self.hidden_size
        if hidden % self.num_attention_heads:
            raise ConfigError(
                f"audio_config.hidden_size {hidden} is not a multiple of num_attention_heads "
                f"{self.num_attention_heads}"
            )
        for name in ("ext_pw_out_channel", "depthwise_separable_out_channel"):
            if getattr(hf, name, None) != hidden:  # its output is added to the block's input
                raise ConfigError(f"audio_config.{name} {getattr(hf, name, None)!r} != {hidden}")
        if getattr(hf, "downsample_rate", 1) != 1:
            raise ConfigError(
                f"audio_config.downsample_rate {hf.downsample_rate!r}: transformers' projection "
                "takes the encoder's width as it is; only 1 runs"
            )
        steps = self.time_reduction.bit_length() - 1
        if self.time_reduction < 2 or 1 << steps != self.time_reduction:
            raise ConfigError(f"audio_config.time_reduction {self.time_reduction}: not 2, 4, 8...")
        if self.left_chunk < 0:
            raise ConfigError(f"audio_config.left_chunk {self.left_chunk} is negative")

    @property
    def subsampling_steps(self) -> int:
        """The stride-2 convolutions of the subsampler: ``log2(time_reduction)``."""
        return self.time_reduction.bit_length() - 1

    @property
    def subsampled_mels(self) -> int:
        """The mel axis after the subsampler (each step halves it, rounding up)."""
        size = self.input_size
        for _ in range(self.subsampling_steps):
            size = math.floor((size - 1) / 2 + 1)
        return size


def _i64(value) -> ir.Tensor:
    return ir.tensor(np.asarray(value, np.int64))


class _Activation(nn.Module):
    """A parameterless slot of ``torch.nn.Sequential``: keeps the checkpoint's indices."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.act = get_activation(name)

    def forward(self, op, x):
        return self.act(op, x)


class Phi4MultimodalAudioNemoConvSubsampling(nn.Module):
    """``[clips, frames, mels]`` -> ``[clips, ceil(frames / time_reduction), hidden]``."""

    def __init__(self, config: Phi4MultimodalAudioConfig) -> None:
        super().__init__()
        channels = config.nemo_conv_channels
        layers = [Conv2d(1, channels, 3, stride=2, padding=1), _Activation(config.nemo_activation)]
        for _ in range(config.subsampling_steps - 1):
            layers += [
                Conv2d(channels, channels, 3, stride=2, padding=1, groups=channels),
                Conv2d(channels, channels, 1),
                _Activation(config.nemo_activation),
            ]
        self.conv = nn.ModuleList(layers)
        self.out = Linear(channels * config.subsampled_mels, config.hidden_size, bias=True)

    def forward(self, op, features):
        x = op.Unsqueeze(features, [1])  # [clips, 1, frames, mels]
        for layer in self.conv:
            x = layer(op, x)  # [clips, channels, tokens, mels']
        x = op.Transpose(x, perm=[0, 2, 1, 3])
        shape = op.Concat(op.Shape(x, start=0, end=2), op.Constant(value_ints=[-1]), axis=0)
        return self.out(op, op.Reshape(x, shape))  # [clips, tokens, hidden]


class Phi4MultimodalAudioRelativeAttentionBias(nn.Module):
    """``[1, heads, window, window]``: a learned bias per head and clipped key - query offset."""

    def __init__(self, config: Phi4MultimodalAudioConfig) -> None:
        super().__init__()
        self.max_distance, self.symmetric = config.bias_max_distance, config.bias_symmetric
        buckets = self.max_distance * (1 if self.symmetric else 2)
        self.bias_values = Embedding(buckets, config.num_attention_heads)

    def forward(self, op, window):
        positions = op.Range(op.Constant(value=_i64(0)), window, op.Constant(value=_i64(1)))
        offset = op.Sub(op.Unsqueeze(positions, [0]), op.Unsqueeze(positions, [1]))  # key - query
        offset = op.Clip(
            offset, _scalar(op, -self.max_distance), _scalar(op, self.max_distance - 1)
        )
        bucket = (
            op.Abs(offset) if self.symmetric else op.Add(offset, _scalar(op, self.max_distance))
        )
        bias = self.bias_values(op, bucket)  # [window, window, heads]
        return op.Unsqueeze(op.Transpose(bias, perm=[2, 0, 1]), [0])


def _scalar(op, value: int):
    return op.Constant(value=_i64(value))


class Phi4MultimodalAudioMLP(nn.Module):
    """LayerNorm, then ``gate_up_proj`` (the up half times ``act`` of the gate half), ``down_proj``."""

    def __init__(self, config: Phi4MultimodalAudioConfig) -> None:
        super().__init__()
        hidden, inner = config.hidden_size, config.intermediate_size
        self.layer_norm = LayerNorm(hidden)
        self.gate_up_proj = Linear(hidden, 2 * inner, bias=True)
        self.down_proj = Linear(inner, hidden, bias=True)
        self.act = get_activation(config.activation)

    def forward(self, op, x):
        up_gate = self.gate_up_proj(op, self.layer_norm(op, x))
        up, gate = op.Split(up_gate, num_outputs=2, axis=-1, _outputs=2)
        return self.down_proj(op, op.Mul(up, self.act(op, gate)))


class Phi4MultimodalAudioAttention(nn.Module):
    """Multi-head attention with biases, the scores plus ``bias [rows, heads, w, w]``."""

    def __init__(self, config: Phi4MultimodalAudioConfig) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.heads, self.head_dim = config.num_attention_heads, hidden // config.num_attention_heads
        self.q_proj = Linear(hidden, hidden, bias=True)
        self.k_proj = Linear(hidden, hidden, bias=True)
        self.v_proj = Linear(hidden, hidden, bias=True)
        self.o_proj = Linear(hidden, hidden, bias=True)

    def forward(self, op, x, bias):
        heads = op.Constant(value_ints=[0, 0, self.heads, self.head_dim])

        def split(proj):  # [rows, w, hidden] -> [rows, heads, w, head_dim]
            return op.Transpose(op.Reshape(proj(op, x), heads), perm=[0, 2, 1, 3])

        q, k, v = split(self.q_proj), split(self.k_proj), split(self.v_proj)
        scale = op.CastLike(op.Constant(value_float=self.head_dim**-0.5), x)
        scores = op.Add(op.Mul(op.MatMul(q, op.Transpose(k, perm=[0, 1, 3, 2])), scale), bias)
        out = op.Transpose(op.MatMul(op.Softmax(scores, axis=-1), v), perm=[0, 2, 1, 3])
        return self.o_proj(op, op.Reshape(out, op.Constant(value_ints=[0, 0, -1])))


class Phi4MultimodalAudioGluPointWiseConv(nn.Module):
    """``[rows, hidden, w]``: a pointwise conv to two halves, ``(a + b1) * act(g + b2)``."""

    def __init__(self, config: Phi4MultimodalAudioConfig) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.ext_pw_conv_1d = _Conv1d(hidden, 2 * hidden, 1)
        self.b1 = nn.Parameter([1, hidden, 1])
        self.b2 = nn.Parameter([1, hidden, 1])
        self.act = get_activation(config.conv_glu_type)

    def forward(self, op, x):
        value, gate = op.Split(self.ext_pw_conv_1d(op, x), num_outputs=2, axis=1, _outputs=2)
        return op.Mul(op.Add(value, self.b1), self.act(op, op.Add(gate, self.b2)))


class _Conv1d(nn.Module):
    """``torch.nn.Conv1d`` over ``[rows, channels, w]`` (``weight [out, in / groups, k]``)."""

    def __init__(self, ins: int, outs: int, kernel: int, pad: int = 0, groups: int = 1) -> None:
        super().__init__()
        self.weight = nn.Parameter([outs, ins // groups, kernel])
        self.bias = nn.Parameter([outs])
        self.attrs = dict(kernel_shape=[kernel], pads=[pad, pad], group=groups)

    def forward(self, op, x):
        return op.Conv(x, self.weight, self.bias, **self.attrs)


class Phi4MultimodalAudioDepthWiseSeparableConv1d(nn.Module):
    """A depthwise conv padded ``k - 1`` both sides, then a pointwise one."""

    def __init__(self, config: Phi4MultimodalAudioConfig) -> None:
        super().__init__()
        hidden, k = config.hidden_size, config.kernel_size
        inner = hidden * config.depthwise_multiplier
        self.dw_conv = _Conv1d(hidden, inner, k, pad=k - 1, groups=hidden)
        self.pw_conv = _Conv1d(inner, hidden, 1)

    def forward(self, op, x):
        return self.pw_conv(op, self.dw_conv(op, x))


class Phi4MultimodalAudioConvModule(nn.Module):
    """LayerNorm, GLU, the causal depthwise-separable conv, ``conv_activation``, a pointwise conv."""

    def __init__(self, config: Phi4MultimodalAudioConfig) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.layer_norm = LayerNorm(hidden)
        self.glu = Phi4MultimodalAudioGluPointWiseConv(config)
        self.dw_sep_conv_1d = Phi4MultimodalAudioDepthWiseSeparableConv1d(config)
        self.act = get_activation(config.conv_activation)
        self.ext_pw_conv_1d = _Conv1d(hidden, hidden, 1)
        self.kernel_size = config.kernel_size

    def forward(self, op, x):
        x = op.Transpose(self.layer_norm(op, x), perm=[0, 2, 1])  # [rows, hidden, w]
        x = self.dw_sep_conv_1d(op, self.glu(op, x))  # [rows, hidden, w + k - 1]
        if self.kernel_size > 1:  # keep the first w: each output sees its past only
            x = op.Slice(x, [0], [-(self.kernel_size - 1)], [2])
        x = self.ext_pw_conv_1d(op, self.act(op, x))
        return op.Transpose(x, perm=[0, 2, 1])


class Phi4MultimodalAudioConformerEncoderLayer(nn.Module):
    """Half a feed-forward, attention, the conv module, half a feed-forward, LayerNorm."""

    def __init__(self, config: Phi4MultimodalAudioConfig) -> None:
        super().__init__()
        self.feed_forward_in = Phi4MultimodalAudioMLP(config)
        self.self_attn = Phi4MultimodalAudioAttention(config)
        self.conv = Phi4MultimodalAudioConvModule(config)
        self.feed_forward_out = Phi4MultimodalAudioMLP(config)
        self.layer_norm_att = LayerNorm(config.hidden_size)
        self.layer_norm = LayerNorm(config.hidden_size)

    def forward(self, op, x, bias):
        half = op.CastLike(op.Constant(value_float=0.5), x)
        x = op.Add(x, op.Mul(half, self.feed_forward_in(op, x)))
        x = op.Add(x, self.self_attn(op, self.layer_norm_att(op, x), bias))
        x = op.Add(x, self.conv(op, x))
        x = op.Add(x, op.Mul(half, self.feed_forward_out(op, x)))
        return self.layer_norm(op, x)


class Phi4MultimodalAudioMeanVarianceNormLayer(nn.Module):
    """``(x - global_mean) * global_invstd`` over the mel bins."""

    def __init__(self, config: Phi4MultimodalAudioConfig) -> None:
        super().__init__()
        self.global_mean = nn.Parameter([config.input_size])
        self.global_invstd = nn.Parameter([config.input_size])

    def forward(self, op, x):
        return op.Mul(op.Sub(x, self.global_mean), self.global_invstd)


class Phi4MultimodalAudioModel(nn.Module):
    """``[clips, frames, mels]`` and each clip's real frames -> ``[clips, tokens, hidden]``."""

    def __init__(self, config: Phi4MultimodalAudioConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder_embedding = Phi4MultimodalAudioMeanVarianceNormLayer(config)
        self.embed = Phi4MultimodalAudioNemoConvSubsampling(config)
        self.relative_attention_bias_layer = Phi4MultimodalAudioRelativeAttentionBias(config)
        self.encoders = nn.ModuleList(
            [Phi4MultimodalAudioConformerEncoderLayer(config) for _ in range(config.num_blocks)]
        )

    def forward(self, op, features, real_frames):
        x = self.embed(op, self.encoder_embedding(op, features))  # [clips, tokens, hidden]
        hidden = self.config.hidden_size
        tokens = op.Shape(x, start=1, end=2)  # [1]
        window = op.Min(tokens, op.Constant(value_ints=[WINDOW]))
        windows = op.Div(op.Sub(op.Add(tokens, window), _scalar(op, 1)), window)  # ceil
        padded = op.Mul(windows, window)
        # Each clip's real tokens: ceil(real frames / time_reduction), as a prefix.
        reduction = _scalar(op, self.config.time_reduction)
        lengths = op.Div(op.Sub(op.Add(real_frames, reduction), _scalar(op, 1)), reduction)
        # A clip real to its end sees the last window's padding too: transformers' processor
        # gives a lone clip no mask, and its encoder then masks no padding.
        whole = op.Equal(real_frames, op.Squeeze(op.Shape(features, start=1, end=2), [0]))
        lengths = op.Where(whole, op.Squeeze(padded, [0]), lengths)
        slots = op.Range(_scalar(op, 0), op.Squeeze(padded, [0]), _scalar(op, 1))
        real = op.Less(op.Unsqueeze(slots, [0]), op.Unsqueeze(lengths, [1]))  # [clips, padded]
        pad = op.Concat(op.Constant(value_ints=[0, 0, 0, 0]), op.Sub(padded, tokens), [0], axis=0)
        x = op.Pad(x, pad)  # the last window padded with zeros
        rows = op.Concat(op.Constant(value_ints=[-1]), window, axis=0)
        x = op.Reshape(x, op.Concat(rows, [hidden], axis=0))  # [clips * windows, window, hidden]
        keys = op.Unsqueeze(op.Reshape(real, rows), [1, 2])  # [rows, 1, 1, window]
        visible = op.And(keys, self.streaming(op, op.Squeeze(window, [0])))
        bias = self.relative_attention_bias_layer(op, op.Squeeze(window, [0]))
        bias = op.Add(bias, op.CastLike(visible, x))  # +1 where seen (module docstring)
        for layer in self.encoders:
            x = layer(op, x, bias)
        x = op.Reshape(x, op.Concat(op.Shape(features, start=0, end=1), [-1, hidden], axis=0))
        return op.Slice(x, [0], tokens, [1])  # [clips, tokens, hidden]

    def streaming(self, op, window):
        """``[window, window]`` bool: the keys each query sees by chunks (all without chunks)."""
        if self.config.chunk_size <= 0:
            return op.Constant(value=ir.tensor(np.array(True)))
        positions = op.Range(_scalar(op, 0), window, _scalar(op, 1))
        chunk = op.Div(positions, _scalar(op, self.config.chunk_size))
        query, key = op.Unsqueeze(chunk, [1]), op.Unsqueeze(chunk, [0])
        earliest = op.Sub(query, _scalar(op, self.config.left_chunk))
        return op.And(op.LessOrEqual(key, query), op.GreaterOrEqual(key, earliest))


class Phi4MultimodalAudioEmbedding(nn.Module):
    """The encoder, then the speech or the vision-speech projection pair (module docstring)."""

    def __init__(self, config: Phi4MultimodalAudioConfig, text_hidden: int) -> None:
        super().__init__()
        self.encoder = Phi4MultimodalAudioModel(config)
        hidden = config.hidden_size
        self.up_proj_for_speech = Linear(hidden, text_hidden, bias=True)
        self.down_proj_for_speech = Linear(text_hidden, text_hidden, bias=True)
        self.up_proj_for_vision_speech = Linear(hidden, text_hidden, bias=True)
        self.down_proj_for_vision_speech = Linear(text_hidden, text_hidden, bias=True)
        self.act = get_activation("gelu")

    def forward(self, op, features, feature_attention_mask, audio_sizes, audio_projection_mode):
        real_frames = op.ReduceSum(op.Cast(feature_attention_mask, to=INT64), [1], keepdims=0)
        states = self.encoder(op, features, real_frames)  # [clips, tokens, hidden]
        # One graph serves both modes: the weights are chosen, not the products computed twice.
        # odd: the prompt has an image (mobius' processor gives 1, onnxruntime-genai's 3)
        mode = op.Reshape(audio_projection_mode, [-1])
        vision = op.Equal(op.Mod(mode, _scalar(op, 2)), _scalar(op, 1))
        vision = op.Squeeze(op.Slice(vision, [0], [1], [0]), [0])

        def project(op, x, speech: Linear, vision_speech: Linear):
            for linear in (speech, vision_speech):  # named as their own calls would name them
                with module_scope(op, linear):
                    pass
            weight = op.Where(vision, vision_speech.weight, speech.weight)
            return op.Add(op.MatMul(x, weight), op.Where(vision, vision_speech.bias, speech.bias))

        up = project(op, states, self.up_proj_for_speech, self.up_proj_for_vision_speech)
        x = project(
            op, self.act(op, up), self.down_proj_for_speech, self.down_proj_for_vision_speech
        )
        tokens = op.Range(
            _scalar(op, 0), op.Squeeze(op.Shape(x, start=1, end=2), [0]), _scalar(op, 1)
        )
        kept = op.Less(op.Unsqueeze(tokens, [0]), op.Unsqueeze(audio_sizes, [1]))  # [clips, tokens]
        return op.GatherND(x, op.Transpose(op.NonZero(kept), perm=[1, 0]))  # [audio tokens, text]
