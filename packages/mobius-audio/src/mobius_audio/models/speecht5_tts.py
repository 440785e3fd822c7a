"""SpeechT5 text-to-speech: a text encoder, a speech decoder one frame at a time, a postnet.

``SpeechT5ForTextToSpeech`` shares ``model_type`` ``speecht5`` with the speech
recogniser (:mod:`mobius_audio.models.speecht5`); it is registered under its
architecture name, which core's lookup reads from ``config.json``'s
``architectures`` first, so ``mobius build microsoft/speecht5_tts`` builds this.
Graphs: :mod:`mobius_audio.tasks_speecht5_tts`.

- Text encoder prenet: token embeddings plus ``alpha`` times the interleaved
  sin/cos table (``pe[:, 0::2] = sin``, ``pe[:, 1::2] = cos``), then the ASR
  model's encoder (LayerNorm, post-LN layers with the relative position bias).
- Speech decoder prenet, per frame: ReLU Linear layers, each followed by
  transformers' "consistent" dropout, which is on at inference (Tacotron 2's
  variability): a 0/1 mask, the same for every row of the batch, keeping a unit
  where it is 1 and dividing by ``1 - p``. The mask is a graph input so that the
  runner draws it (seeded) and a test can hand transformers the same one. Then a
  Linear, the scaled positions at the cache length, and the L2-normalised speaker
  embedding concatenated and projected (ReLU).
- The ASR model's decoder layers (self-attention through the cache,
  cross-attention over the text), no final norm.
- ``speech_decoder_postnet``: ``feat_out`` (``reduction_factor`` mel frames per
  step), ``prob_out`` (stop logits, a sigmoid each), and the conv + BatchNorm (+
  tanh) residual postnet, run once over the whole spectrogram.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import BatchNorm, Embedding, Linear, module_scope
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_audio.models._vits_layers import floats, same_conv
from mobius_audio.models.speecht5 import (
    SpeechT5Config,
    SpeechT5DecoderLayer,
    SpeechT5Encoder,
    _check_positive,
    decode_layers,
)
from mobius_audio.models.whisper import _length

ARCHITECTURE = "SpeechT5ForTextToSpeech"


@dataclass
class SpeechT5TtsConfig(SpeechT5Config):
    """The recogniser's fields (encoder, decoder layers) and the speech decoder's."""

    architecture: ClassVar[str] = ARCHITECTURE

    num_mel_bins: int = 80
    reduction_factor: int = 2
    speech_decoder_prenet_layers: int = 2
    speech_decoder_prenet_units: int = 256
    speech_decoder_prenet_dropout: float = 0.5
    speaker_embedding_dim: int = 512
    speech_decoder_postnet_layers: int = 5
    speech_decoder_postnet_units: int = 256
    speech_decoder_postnet_kernel: int = 5
    max_speech_positions: int = 4000
    max_text_positions: int = 450

    @classmethod
    def hf_fields(cls, hf: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf)
        names = (
            "num_mel_bins", "reduction_factor", "speech_decoder_prenet_layers",
            "speech_decoder_prenet_units", "speaker_embedding_dim",
            "speech_decoder_postnet_layers", "speech_decoder_postnet_units",
            "speech_decoder_postnet_kernel", "max_speech_positions", "max_text_positions",
        )  # fmt: skip
        _check_positive(hf, *names)
        dropout = hf.speech_decoder_prenet_dropout
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)):
            raise ConfigError(
                f"speecht5: speech_decoder_prenet_dropout {dropout!r} is not a number"
            )
        if not 0 <= dropout < 1:  # transformers divides by 1 - p
            raise ConfigError(f"speecht5: speech_decoder_prenet_dropout {dropout} is not in [0, 1)")
        if hf.speech_decoder_postnet_kernel % 2 == 0:  # torch pads (k - 1) // 2: an even k grows
            raise ConfigError("speecht5: an even speech_decoder_postnet_kernel is not built")
        if hf.hidden_size % 2:  # the interleaved position table needs pairs
            raise ConfigError("speecht5: text-to-speech needs an even hidden_size")
        return {**fields, **{name: getattr(hf, name) for name in names}} | {
            "speech_decoder_prenet_dropout": float(dropout)
        }


class SpeechT5ScaledPositionalEncoding(nn.Module):
    """``x + alpha * pe[start:start + len]`` with transformers' interleaved sin/cos table."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter([])
        # float32 as transformers makes it: exp(arange(0, dim, 2) * -(ln(10000) / dim))
        exponent = np.float32(-(math.log(10000.0) / dim))
        self.frequencies = np.exp(np.arange(0, dim, 2, dtype=np.float32) * exponent)

    def forward(self, op, x, start):
        length = op.Squeeze(_length(op, x, 1), [0])
        positions = op.Cast(op.Range(start, op.Add(start, length), 1), to=ir.DataType.FLOAT)
        angles = op.Mul(op.Unsqueeze(positions, [1]), floats(op, self.frequencies))  # [len, d/2]
        table = op.Concat(
            op.Unsqueeze(op.Sin(angles), [2]), op.Unsqueeze(op.Cos(angles), [2]), axis=2
        )
        table = op.Reshape(table, op.Constant(value_ints=[0, -1]))  # sin, cos, sin, cos...
        return op.Add(x, op.Mul(self.alpha, op.CastLike(table, x)))


class SpeechT5TextEncoderPrenet(nn.Module):
    """Token embeddings plus the scaled positions; the mask is the encoder's, not read here."""

    def __init__(self, config: SpeechT5TtsConfig) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.encode_positions = SpeechT5ScaledPositionalEncoding(config.hidden_size)

    def forward(self, op, input_ids, attention_mask):
        x = self.embed_tokens(op, input_ids)
        return self.encode_positions(op, x, op.Constant(value_int=0))


class SpeechT5TextEncoder(SpeechT5Encoder):
    """The recogniser's encoder over the text prenet."""

    prenet_class = SpeechT5TextEncoderPrenet


class SpeechT5SpeechDecoderPrenet(nn.Module):
    """Mel frames (and the speaker) to the decoder's width; see the module docstring."""

    def __init__(self, config: SpeechT5TtsConfig) -> None:
        super().__init__()
        units = config.speech_decoder_prenet_units
        self.layers = nn.ModuleList(
            [
                Linear(config.num_mel_bins if i == 0 else units, units, bias=True)
                for i in range(config.speech_decoder_prenet_layers)
            ]
        )
        self.final_layer = Linear(units, config.hidden_size, bias=True)
        self.encode_positions = SpeechT5ScaledPositionalEncoding(config.hidden_size)
        d = config.hidden_size
        self.speaker_embeds_layer = Linear(config.speaker_embedding_dim + d, d, bias=True)
        self.keep_scale = 1.0 - config.speech_decoder_prenet_dropout

    def forward(self, op, frames, speaker_embeddings, dropout_mask, start):
        x = frames
        for i, layer in enumerate(self.layers):
            x = op.Relu(layer(op, x))
            mask = op.Gather(dropout_mask, op.Constant(value_int=i), axis=0)  # [frames, units]
            x = op.Div(op.Mul(x, mask), floats(op, self.keep_scale))
        x = self.encode_positions(op, self.final_layer(op, x), start)
        # F.normalize: x / max(||x||, 1e-12)
        norm = op.Max(op.ReduceL2(speaker_embeddings, [1], keepdims=1), floats(op, 1e-12))
        speaker = op.Unsqueeze(op.Div(speaker_embeddings, norm), [1])  # [batch, 1, dim]
        speaker = op.Expand(
            speaker, op.Concat(op.Shape(x, end=2), op.Shape(speaker, start=2), axis=0)
        )
        return op.Relu(self.speaker_embeds_layer(op, op.Concat(x, speaker, axis=-1)))


class SpeechT5SpeechDecoder(nn.Module):
    """The speech prenet and the recogniser's decoder layers; no final norm."""

    def __init__(self, config: SpeechT5TtsConfig) -> None:
        super().__init__()
        self.prenet = SpeechT5SpeechDecoderPrenet(config)
        self.layers = nn.ModuleList(
            [SpeechT5DecoderLayer(config) for _ in range(config.decoder_layers)]
        )

    def forward(self, op, frames, speaker, dropout_mask, encoder_mask, self_cache, cross_cache):
        past_length = op.Squeeze(_length(op, self_cache[0][0], 2), [0])
        x = self.prenet(op, frames, speaker, dropout_mask, past_length)
        return decode_layers(op, self.layers, x, encoder_mask, self_cache, cross_cache)


class SpeechT5Model(nn.Module):
    def __init__(self, config: SpeechT5TtsConfig) -> None:
        super().__init__()
        self.encoder = SpeechT5TextEncoder(config)
        self.decoder = SpeechT5SpeechDecoder(config)


class SpeechT5BatchNormConvLayer(nn.Module):
    """Conv (no bias, same length), BatchNorm in eval, tanh except on the last layer."""

    def __init__(self, cin: int, cout: int, kernel: int, last: bool) -> None:
        super().__init__()
        self.conv = same_conv(cin, cout, kernel, bias=False)
        self.batch_norm = BatchNorm(cout)
        self.last = last

    def forward(self, op, x):
        x = self.batch_norm(op, self.conv(op, x))
        return x if self.last else op.Tanh(x)


class SpeechT5SpeechDecoderPostnet(nn.Module):
    """``feat_out`` and ``prob_out`` per step; :meth:`postnet` over the whole spectrogram."""

    def __init__(self, config: SpeechT5TtsConfig) -> None:
        super().__init__()
        d, mel, r = config.hidden_size, config.num_mel_bins, config.reduction_factor
        self.feat_out = Linear(d, mel * r, bias=True)
        self.prob_out = Linear(d, r, bias=True)
        count, units = config.speech_decoder_postnet_layers, config.speech_decoder_postnet_units
        self.layers = nn.ModuleList(
            [
                SpeechT5BatchNormConvLayer(
                    mel if i == 0 else units,
                    mel if i == count - 1 else units,
                    config.speech_decoder_postnet_kernel,
                    last=i == count - 1,
                )
                for i in range(count)
            ]
        )
        self.num_mel_bins = mel

    def forward(self, op, hidden):
        """``[batch, steps * reduction_factor, mel]`` frames and ``[batch, steps, r]`` stop probabilities."""
        spectrum = op.Reshape(
            self.feat_out(op, hidden), op.Constant(value_ints=[0, -1, self.num_mel_bins])
        )
        return spectrum, op.Sigmoid(self.prob_out(op, hidden))

    def postnet(self, op, spectrogram):
        x = op.Transpose(spectrogram, perm=[0, 2, 1])
        for layer in self.layers:
            x = layer(op, x)
        return op.Add(spectrogram, op.Transpose(x, perm=[0, 2, 1]))


class SpeechT5ForTextToSpeech(Model):
    """``speecht5`` (text encoder, speech decoder) and ``speech_decoder_postnet``: the hooks
    of :class:`mobius_audio.tasks_speecht5_tts.TextToSpeechTask`."""

    task = "text-to-speech"
    config_class = SpeechT5TtsConfig
    #: Checkpoint prefixes and the module tree's: the wrappers hold no tensors of their own.
    RENAMES = (
        ("speecht5.encoder.wrapped_encoder.", "speecht5.encoder."),
        ("speecht5.decoder.wrapped_decoder.", "speecht5.decoder."),
    )
    # The position tables older transformers saved, BatchNorm's training counter.
    ignored = ("*.encode_positions.pe", "*.num_batches_tracked")

    def __init__(self, config: SpeechT5TtsConfig) -> None:
        super().__init__()
        self.config = config
        self.speecht5 = SpeechT5Model(config)
        self.speech_decoder_postnet = SpeechT5SpeechDecoderPostnet(config)

    def cache_shapes(self) -> tuple[int, int, int]:
        """``(decoder layers, heads, head_dim)`` of both caches."""
        config = self.config
        heads = config.decoder_heads
        return config.decoder_layers, heads, config.hidden_size // heads

    def encode(self, op, input_ids, attention_mask):
        """The text's states and every decoder layer's cross-attention ``(key, value)``."""
        model = self.speecht5
        with module_scope(op, self, model):
            hidden = model.encoder(op, input_ids, attention_mask)
            cross = []
            for layer in model.decoder.layers:  # computed once here, read at every step
                with module_scope(op, model.decoder, layer, layer.encoder_attn):
                    cross.append(layer.encoder_attn.project_kv(op, hidden))
        return hidden, cross

    def decode(self, op, frames, speaker, dropout_mask, encoder_mask, self_cache, cross_cache):
        """The new mel frames, the stop probabilities and the self-attention presents."""
        with module_scope(op, self):
            with module_scope(op, self.speecht5):
                hidden, presents = self.speecht5.decoder(
                    op, frames, speaker, dropout_mask, encoder_mask, self_cache, cross_cache
                )
            spectrum, stop = self.speech_decoder_postnet(op, hidden)
        return spectrum, stop, presents

    def postnet(self, op, spectrogram):
        """The residual conv postnet over ``[batch, frames, mel]``."""
        with module_scope(op, self, self.speech_decoder_postnet):
            return self.speech_decoder_postnet.postnet(op, spectrogram)

    def sanitize(self, weights: dict) -> dict:
        out = {}
        for key, value in weights.items():
            for old, new in self.RENAMES:
                if key.startswith(old):
                    key = new + key[len(old) :]
                    break
            out[key] = value
        return out


MODEL_TYPES = {ARCHITECTURE: SpeechT5ForTextToSpeech}
