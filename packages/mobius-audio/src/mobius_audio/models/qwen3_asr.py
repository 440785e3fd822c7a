"""Qwen3-ASR: Qwen3-Omni's audio encoder over fixed one-window chunks, an MLP, Qwen3.

transformers' ``Qwen3ASREncoder`` is Qwen3-Omni's audio tower with two changes: the
extractor pads the mel frames to a multiple of ``2 * n_window``, and the tower cuts
``input_features`` into chunks of exactly that many frames (padding frames included:
the convolutions read them as they are), and the projection moved out of the tower.
Each chunk runs as a ``[1, mel_bins, frames]`` image through ``conv2d1..3`` (stride 2,
GELU after each); ``conv_out`` maps channels x frequency bins to ``d_model`` and the
chunk's states get the sinusoid positions from 0. A chunk of ``f`` real frames
(``input_features_mask``) keeps its first ``ceil(ceil(ceil(f / 2) / 2) / 2)`` states,
chunk after chunk; the Whisper-like layers (biased key projection) attend within
windows of ``n_window_infer / (2 * n_window)`` consecutive chunks of a clip, then
``ln_post``. ``multi_modal_projector`` (``linear_1``, the tower's
``activation_function``, ``linear_2``, biased) maps the states to the text decoder's
width. The text decoder is whatever mobius registers for ``text_config.model_type``
(Qwen3 for Qwen/Qwen3-ASR-1.7B-hf).

Checkpoints: transformers' layout (``audio_tower.*``, ``multi_modal_projector.*``,
``language_model.model.*``, ``language_model.lm_head.*``) and transformers 5's saved
one (``model.audio_tower.*``, ``model.language_model.*``, ``lm_head.*``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    ACTIVATIONS,
    Conv2d,
    LayerNorm,
    Linear,
    Seq2SeqAttention,
    get_activation,
)
from mobius.errors import ConfigError
from mobius_audio.models._audio_lm import AudioLanguageConfig, AudioLanguageModel, positive_int
from mobius_audio.models.qwen2_audio import MaskedEncoderLayer, first_of_each_row

INT64 = ir.DataType.INT64


def conv_length(length: int) -> int:
    """What a kernel-3, stride-2, padding-1 convolution leaves of ``length``."""
    return (length - 1) // 2 + 1


def sinusoids(length: int, channels: int) -> np.ndarray:
    """``[length, channels]`` float32: sines then cosines, timescales up to 10000 (float32)."""
    step = np.log(10000) / (channels // 2 - 1)
    inv_timescales = np.exp((-step * np.arange(channels // 2)).astype(np.float32))
    scaled = np.arange(length, dtype=np.float32)[:, None] * inv_timescales[None, :]
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1).astype(np.float32)


@dataclass
class Qwen3ASREncoderConfig:
    """The ``audio_config`` of Qwen3-ASR (``qwen3_asr_encoder``)."""

    num_mel_bins: int
    d_model: int
    encoder_layers: int
    encoder_attention_heads: int
    encoder_ffn_dim: int
    downsample_hidden_size: int
    output_dim: int
    n_window: int
    n_window_infer: int
    act: str = "gelu"

    @property
    def hidden_size(self) -> int:  # the name MaskedEncoderLayer reads
        return self.d_model

    @property
    def chunk_frames(self) -> int:
        return 2 * self.n_window

    @property
    def window_chunks(self) -> int:
        """The chunks of one attention window."""
        return self.n_window_infer // self.chunk_frames

    @property
    def frequency_bins(self) -> int:
        return conv_length(conv_length(conv_length(self.num_mel_bins)))

    @property
    def chunk_states(self) -> int:
        return conv_length(conv_length(conv_length(self.chunk_frames)))

    @classmethod
    def from_hf(cls, hf: Any) -> Qwen3ASREncoderConfig:
        where = "audio_config"
        names = (
            "num_mel_bins", "d_model", "encoder_layers", "encoder_attention_heads",
            "encoder_ffn_dim", "downsample_hidden_size", "output_dim", "n_window",
            "n_window_infer",
        )  # fmt: skip
        fields = {name: positive_int(hf, name, where) for name in names}
        if fields["d_model"] % fields["encoder_attention_heads"]:
            raise ConfigError(
                f"audio_config.d_model {fields['d_model']} is not a multiple of "
                f"encoder_attention_heads {fields['encoder_attention_heads']}"
            )
        if fields["d_model"] % 2 or fields["d_model"] < 4:
            raise ConfigError(f"audio_config.d_model {fields['d_model']}: sinusoids need it even")
        if fields["n_window_infer"] % (2 * fields["n_window"]):
            raise ConfigError(
                f"audio_config.n_window_infer {fields['n_window_infer']} is not a multiple of "
                f"2 * n_window ({2 * fields['n_window']})"
            )
        act = getattr(hf, "activation_function", "gelu")
        if act not in ACTIVATIONS:
            raise ConfigError(f"audio_config.activation_function {act!r} is not one mobius knows")
        return cls(**fields, act=act)


class Qwen3ASRAudioEncoderLayer(MaskedEncoderLayer):
    """Qwen2-Audio's masked Whisper layer, its key projection biased."""

    def __init__(self, config: Qwen3ASREncoderConfig) -> None:
        super().__init__(config, config.encoder_attention_heads, config.encoder_ffn_dim)
        self.self_attn = Seq2SeqAttention(config.d_model, config.encoder_attention_heads)


def _int(op, value: int):
    return op.Constant(value=ir.tensor(np.array(value, np.int64)))


class Qwen3ASREncoder(nn.Module):
    """``conv2d1..3``, ``conv_out``, ``layers``, ``ln_post``: ``[audio tokens, d_model]``."""

    def __init__(self, config: Qwen3ASREncoderConfig) -> None:
        super().__init__()
        self.config = config
        d, h = config.d_model, config.downsample_hidden_size
        self.conv2d1 = Conv2d(1, h, 3, stride=2, padding=1)
        self.conv2d2 = Conv2d(h, h, 3, stride=2, padding=1)
        self.conv2d3 = Conv2d(h, h, 3, stride=2, padding=1)
        self.conv_out = Linear(h * config.frequency_bins, d, bias=False)
        self.layers = nn.ModuleList(
            [Qwen3ASRAudioEncoderLayer(config) for _ in range(config.encoder_layers)]
        )
        self.ln_post = LayerNorm(d, 1e-5)
        self.positions = sinusoids(config.chunk_states, d)

    def forward(self, op, input_features, input_features_mask):
        c = self.config
        chunk = c.chunk_frames
        # [clips, mels, frames] -> [clips * chunks, 1, mels, chunk]
        x = op.Reshape(input_features, op.Constant(value_ints=[0, c.num_mel_bins, -1, chunk]))
        x = op.Transpose(x, perm=[0, 2, 1, 3])
        x = op.Reshape(x, op.Constant(value_ints=[-1, 1, c.num_mel_bins, chunk]))
        for conv in (self.conv2d1, self.conv2d2, self.conv2d3):
            x = op.Gelu(conv(op, x))  # [chunks, h, bins, states]
        x = op.Transpose(x, perm=[0, 3, 1, 2])  # [chunks, states, h, bins]
        width = c.downsample_hidden_size * c.frequency_bins
        x = self.conv_out(op, op.Reshape(x, op.Constant(value_ints=[0, 0, width])))
        x = op.Add(x, op.CastLike(op.Constant(value=ir.tensor(self.positions)), x))
        # each chunk's real frames, then states: ceil(f / 2) three times (0 stays 0)
        mask = op.Reshape(
            op.Cast(input_features_mask, to=INT64), op.Constant(value_ints=[0, -1, chunk])
        )
        chunks_per_clip = op.Shape(mask, start=1, end=2)  # [1]
        states = op.Reshape(op.ReduceSum(mask, [2], keepdims=0), op.Constant(value_ints=[-1]))
        for _ in range(3):
            states = op.Div(op.Add(states, _int(op, 1)), _int(op, 2))
        keep = first_of_each_row(op, states, op.Constant(value_ints=[c.chunk_states]))
        kept = op.Transpose(op.NonZero(keep), perm=[1, 0])  # [tokens, (chunk, state)]
        x = op.GatherND(x, kept)  # [tokens, d]
        chunk_of = op.Squeeze(op.Slice(kept, [0], [1], [1]), [1])  # [tokens]
        # attention windows: window_chunks consecutive chunks of one clip
        per_clip = op.Squeeze(chunks_per_clip, [0])
        clip = op.Div(chunk_of, per_clip)
        window = op.Div(op.Mod(chunk_of, per_clip), _int(op, c.window_chunks))
        group = op.Add(op.Mul(clip, per_clip), window)
        same = op.Equal(op.Unsqueeze(group, [1]), op.Unsqueeze(group, [0]))
        attend = op.Unsqueeze(same, [0, 1])  # [1, 1, tokens, tokens]
        x = op.Unsqueeze(x, [0])
        for layer in self.layers:
            x = layer(op, x, attend)
        return self.ln_post(op, op.Squeeze(x, [0]))


class Qwen3ASRMultiModalProjector(nn.Module):
    def __init__(self, width: int, out: int, act: str) -> None:
        super().__init__()
        self.linear_1 = Linear(width, width, bias=True)
        self.act = get_activation(act)
        self.linear_2 = Linear(width, out, bias=True)

    def forward(self, op, x):
        return self.linear_2(op, self.act(op, self.linear_1(op, x)))


@dataclass
class Qwen3ASRConfig(AudioLanguageConfig):
    audio_config_class = Qwen3ASREncoderConfig

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        if fields["audio"].output_dim != fields["text"].hidden_size:
            raise ConfigError(
                f"audio_config.output_dim {fields['audio'].output_dim} is not the text "
                f"decoder's hidden_size {fields['text'].hidden_size}"
            )
        return fields


class Qwen3ASRForConditionalGeneration(AudioLanguageModel):
    config_class = Qwen3ASRConfig

    def make_audio_tower(self, config: Qwen3ASRConfig) -> nn.Module:
        return Qwen3ASREncoder(config.audio)

    def make_projector(self, config: Qwen3ASRConfig) -> nn.Module:
        audio = config.audio
        return Qwen3ASRMultiModalProjector(audio.d_model, audio.output_dim, audio.act)

    def audio_inputs(self, dtype) -> list[tuple]:
        mels = self.config.audio.num_mel_bins
        return [
            ("input_features", dtype, ["num_audios", mels, "audio_frames"]),
            ("input_features_mask", INT64, ["num_audios", "audio_frames"]),
        ]

    def audio_features(self, op, input_features, input_features_mask):
        states = self.audio_tower(op, input_features, input_features_mask)  # [tokens, d]
        return self.multi_modal_projector(op, states)


MODEL_TYPES = {"qwen3_asr": Qwen3ASRForConditionalGeneration}
