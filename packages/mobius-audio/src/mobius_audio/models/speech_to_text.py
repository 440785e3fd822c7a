"""Speech2Text: a GLU conv subsampler over fbank features, fixed sinusoids, pre-norm BART layers.

Each of ``num_conv_layers`` stride-2 convolutions (padding ``kernel // 2``) is
followed by a GLU over the channels, turning ``[batch, frames, features]`` into
about ``frames / 2**n`` states, scaled by ``sqrt(d_model)`` when
``scale_embedding``. Positions are fairseq's: sinusoids (never in checkpoints,
computed in the graph as transformers computes its table) at ``pad_token_id + 1``
onward over real positions, the pad row zero. The encoder counts its positions
over the subsampled mask; the decoder over non-pad tokens, continuing from the
cache length. Layers are Whisper's (pre-norm, exact activations) with biases on
every projection and padding masks on encoder self-attention and cross-attention.
The module tree follows ``Speech2TextForConditionalGeneration`` checkpoints
(``model.encoder.conv.conv_layers.0``..., ``lm_head``); graphs follow the masked
form of :class:`mobius_audio.tasks.SpeechToTextTask`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    CrossAttention,
    Embedding,
    LayerNorm,
    Seq2SeqAttention,
    causal_bias,
    padding_bias,
)
from mobius.errors import ConfigError
from mobius_audio.models.whisper import (
    Conv1d,
    WhisperConfig,
    WhisperDecoderLayer,
    WhisperEncoderLayer,
    WhisperForConditionalGeneration,
    _length,
)

INT64 = ir.DataType.INT64
OFFSET = 2  # fairseq's table keeps two rows before the first position


@dataclass
class Speech2TextConfig(WhisperConfig):
    num_conv_layers: int = 2
    conv_kernel_sizes: tuple[int, ...] = (5, 5)
    conv_channels: int = 1024
    scale_embedding: bool = True
    pad_token_id: int = 1

    @staticmethod
    def features_per_frame(hf: Any) -> int:
        """fbank features per frame, over every input channel."""
        return hf.input_feat_per_channel * hf.input_channels

    @classmethod
    def hf_fields(cls, hf: Any) -> dict[str, Any]:
        kernels = tuple(hf.conv_kernel_sizes)
        if len(kernels) != hf.num_conv_layers:
            raise ConfigError(
                f"speech_to_text: {len(kernels)} conv_kernel_sizes for {hf.num_conv_layers} layers"
            )
        if hf.pad_token_id is None:
            raise ConfigError("speech_to_text: positions count from pad_token_id; it is None")
        if hf.d_model % hf.encoder_attention_heads or hf.d_model % hf.decoder_attention_heads:
            raise ConfigError("speech_to_text: d_model must split evenly into the heads")
        return dict(
            super().hf_fields(hf),
            num_conv_layers=hf.num_conv_layers,
            conv_kernel_sizes=kernels,
            conv_channels=hf.conv_channels,
            scale_embedding=bool(hf.scale_embedding),
            pad_token_id=hf.pad_token_id,
        )


def sinusoids(op, positions, dim: int, padding_idx: int):
    """fairseq's ``[sin | cos]`` rows ``[..., dim]`` at int64 ``positions``; ``padding_idx``'s row is zero.

    transformers tabulates ``position * exp(-i * log(10000) / (half - 1))`` in float32
    and grows the table on demand; the same products are computed here per position.
    """
    half = dim // 2
    step = np.float32(math.log(10000) / (half - 1))
    frequencies = np.exp(np.arange(half, dtype=np.float32) * -step).astype(np.float32)
    angles = op.Mul(
        op.Unsqueeze(op.Cast(positions, to=ir.DataType.FLOAT), [-1]),
        op.Constant(value=ir.tensor(frequencies)),
    )  # [..., half]
    parts = [op.Sin(angles), op.Cos(angles)]
    if dim % 2:  # an odd width ends in a zero column
        parts.append(op.Mul(op.Slice(angles, [0], [1], [-1]), 0.0))
    table = op.Concat(*parts, axis=-1)
    is_pad = op.Unsqueeze(op.Equal(positions, op.Constant(value_int=padding_idx)), [-1])
    return op.Where(is_pad, op.Constant(value_float=0.0), table)


def padding_aware_positions(op, ids, padding_idx: int, past_length):
    """``(cumsum(real) + past) * real + padding_idx`` with ``real = ids != padding_idx`` (fairseq)."""
    pad = op.Constant(value=ir.tensor(padding_idx, dtype=INT64))
    real = op.Cast(op.Not(op.Equal(ids, pad)), to=INT64)
    counts = op.Add(op.CumSum(real, op.Constant(value_int=1)), past_length)
    return op.Add(op.Mul(counts, real), pad)


class Speech2TextEncoderLayer(WhisperEncoderLayer):
    def __init__(self, config: Speech2TextConfig, heads: int, ffn_dim: int) -> None:
        super().__init__(config, heads, ffn_dim)
        self.self_attn = Seq2SeqAttention(config.hidden_size, heads)  # k_proj has a bias too

    def forward(self, op, x, bias):
        x = op.Add(x, self.self_attn(op, self.self_attn_layer_norm(op, x), bias))
        return op.Add(x, self.mlp(op, x))


class Speech2TextDecoderLayer(WhisperDecoderLayer):
    def __init__(self, config: Speech2TextConfig, heads: int, ffn_dim: int) -> None:
        super().__init__(config, heads, ffn_dim)
        self.self_attn = Seq2SeqAttention(config.hidden_size, heads)
        self.encoder_attn = CrossAttention(config.hidden_size, heads)

    def forward(self, op, x, causal, cross_bias, cross, past):
        h, present = self.self_attn(op, self.self_attn_layer_norm(op, x), causal, *past)
        x = op.Add(x, h)
        h = self.encoder_attn(op, self.encoder_attn_layer_norm(op, x), cross_bias, *cross)
        x = op.Add(x, h)
        return op.Add(x, self.mlp(op, x)), present


class Conv1dSubsampler(nn.Module):
    """``conv_layers``: stride-2 convolutions, each followed by a GLU over the channels."""

    def __init__(self, config: Speech2TextConfig) -> None:
        super().__init__()
        n, mid = config.num_conv_layers, config.conv_channels
        self.conv_layers = nn.ModuleList(
            Conv1d(
                config.num_mel_bins if i == 0 else mid // 2,
                mid if i < n - 1 else 2 * config.hidden_size,
                kernel,
                stride=2,
            )
            for i, kernel in enumerate(config.conv_kernel_sizes)
        )

    def forward(self, op, input_features):
        x = op.Transpose(input_features, perm=[0, 2, 1])  # [batch, features, frames]
        for conv in self.conv_layers:
            value, gate = op.Split(conv(op, x), num_outputs=2, axis=1, _outputs=2)
            x = op.Mul(value, op.Sigmoid(gate))  # GLU: [batch, out / 2, frames / 2]
        return op.Transpose(x, perm=[0, 2, 1])  # [batch, states, hidden]


class Speech2TextEncoder(nn.Module):
    def __init__(self, config: Speech2TextConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.config = config
        self.conv = Conv1dSubsampler(config)
        layers = [
            Speech2TextEncoderLayer(config, config.encoder_heads, config.encoder_ffn_dim)
            for _ in range(config.encoder_layers)
        ]
        self.layers = nn.ModuleList(layers)
        self.layer_norm = LayerNorm(d, 1e-5)

    def forward(self, op, input_features, attention_mask):
        config = self.config
        x = self.conv(op, input_features)  # [batch, states, d]
        if config.scale_embedding:
            x = op.Mul(x, math.sqrt(config.hidden_size))
        # transformers counts positions over its "padding mask" (1 at padded states) read
        # as token ids against pad_token_id: the same arithmetic here.
        padded = op.Sub(op.Constant(value_int=1), attention_mask)
        zero = op.Constant(value_int=0)
        positions = padding_aware_positions(op, padded, config.pad_token_id, zero)
        table = sinusoids(op, positions, config.hidden_size, config.pad_token_id)
        x = op.Add(x, op.CastLike(table, x))
        bias = padding_bias(op, attention_mask, x.dtype)
        for layer in self.layers:
            x = layer(op, x, bias)
        return self.layer_norm(op, x)


class Speech2TextDecoder(nn.Module):
    layer_class = (
        Speech2TextDecoderLayer  # SeamlessM4T's text decoder names its layers' parts otherwise
    )

    def __init__(self, config: Speech2TextConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.config = config
        self.embed_tokens = Embedding(config.vocab_size, d)
        layers = [
            self.layer_class(config, config.decoder_heads, config.decoder_ffn_dim)
            for _ in range(config.decoder_layers)
        ]
        self.layers = nn.ModuleList(layers)
        self.layer_norm = LayerNorm(d, 1e-5)

    def forward(self, op, input_ids, encoder_attention_mask, self_cache, cross_cache):
        config = self.config
        x = self.embed_tokens(op, input_ids)
        if config.scale_embedding:
            x = op.Mul(x, math.sqrt(config.hidden_size))
        past = _length(op, self_cache[0][0], 2)
        positions = padding_aware_positions(op, input_ids, config.pad_token_id, past)
        table = sinusoids(op, positions, config.hidden_size, config.pad_token_id)
        x = op.Add(x, op.CastLike(table, x))
        causal = causal_bias(op, input_ids, self_cache[0][0], x.dtype)  # [batch, 1, seq, total]
        cross_bias = padding_bias(op, encoder_attention_mask, x.dtype, queries=input_ids)
        presents = []
        for layer, past_kv, cross in zip(self.layers, self_cache, cross_cache, strict=True):
            x, present = layer(op, x, causal, cross_bias, cross, past_kv)
            presents.append(present)
        return self.layer_norm(op, x), presents


class Speech2TextModel(nn.Module):
    def __init__(self, config: Speech2TextConfig) -> None:
        super().__init__()
        self.encoder = Speech2TextEncoder(config)
        self.decoder = Speech2TextDecoder(config)


def _subsampled(op, length, kernel: int):
    """A stride-2 convolution's output length, padding ``kernel // 2``: ``(n + 2(k//2) - k) // 2 + 1``."""
    return op.Add(op.Div(op.Add(length, 2 * (kernel // 2) - kernel), 2), 1)


class Speech2TextForConditionalGeneration(WhisperForConditionalGeneration):
    """``model`` (encoder, decoder) and ``lm_head``, tied to the decoder's embeddings."""

    config_class = Speech2TextConfig
    model_class = Speech2TextModel
    head_name = "lm_head"
    # Older checkpoints saved the sinusoid tables; they are computed in the graph.
    ignored = (
        "model.encoder.embed_positions.weights",
        "model.decoder.embed_positions.weights",
    )

    def speech_input(self) -> tuple[str, list]:
        """The fbank features the extractor returns, frame-major."""
        return "input_features", ["batch", "frames", self.config.num_mel_bins]

    def encoder_attention_mask(self, op, input_features, attention_mask):
        """The frame mask through the subsampler: ``(length - 1) // 2 + 1`` per conv, as transformers."""
        lengths = op.ReduceSum(attention_mask, op.Constant(value_ints=[1]), keepdims=1)
        states = _length(op, input_features, 1)
        for kernel in self.config.conv_kernel_sizes:
            lengths = op.Add(op.Div(op.Sub(lengths, 1), 2), 1)  # [batch, 1]
            states = _subsampled(op, states, kernel)
        steps = op.Range(
            op.Constant(value_int=0), op.Squeeze(states, [0]), op.Constant(value_int=1)
        )
        return op.Cast(op.Less(steps, lengths), to=INT64)  # [batch, states]


MODEL_TYPES = {"speech_to_text": Speech2TextForConditionalGeneration}
