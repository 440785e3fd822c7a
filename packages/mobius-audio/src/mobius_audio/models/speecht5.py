"""SpeechT5 speech recognition: wav2vec2's front end, a relative-position encoder, a text decoder.

``SpeechT5ForSpeechToText`` here; ``SpeechT5ForTextToSpeech`` (the same ``speecht5``
type, told apart by ``architectures``) is :mod:`mobius_audio.models.speecht5_tts`,
and ``SpeechT5ForSpeechToSpeech`` is refused.

- Speech encoder prenet: wav2vec2's conv feature encoder, feature projection and
  weight-normed position conv (the same modules, the same computation), then
  fairseq sinusoids (Speech2Text's) counted over the real frames, padded frames
  getting the pad row (zero). Unlike wav2vec2, padded frames are not zeroed
  before the position conv: transformers does not.
- Encoder: a LayerNorm first, then post-LN layers whose attention adds a
  relative position bias: the scaled query dotted with ``embed_positions.pe_k``,
  a learned table of the query-minus-key distance clamped to
  ``[-encoder_max_relative_position, encoder_max_relative_position - 1]``.
- Text decoder prenet: token embeddings (times ``sqrt(hidden)`` when
  ``scale_embedding``) plus the same sinusoids at padding-aware positions that
  continue from the cache length; post-LN decoder layers, no final norm; the
  ``lm_head`` (no bias) tied to the embeddings.

The module tree is Whisper's (``model.encoder``/``model.decoder``/``lm_head``, as
:class:`~mobius_audio.models.whisper.WhisperForConditionalGeneration` encodes and
decodes); :attr:`SpeechT5ForSpeechToText.RENAMES` maps the checkpoint's
``speecht5.encoder.wrapped_encoder.*``, ``speecht5.decoder.prenet.*``... onto it.
Graphs follow the masked form of :class:`mobius_audio.tasks.SpeechToTextTask`:
``input_values`` [batch, samples] and its ``attention_mask``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    CrossAttention,
    Embedding,
    LayerNorm,
    Seq2SeqAttention,
    bidirectional_attention,
    causal_bias,
    padding_bias,
)
from mobius.errors import ConfigError
from mobius_audio.models._checks import checked_int
from mobius_audio.models.speech_to_text import padding_aware_positions, sinusoids
from mobius_audio.models.wav2vec2 import (
    Wav2Vec2Attention,
    Wav2Vec2Config,
    Wav2Vec2EncoderLayer,
    Wav2Vec2FeatureEncoder,
    Wav2Vec2FeatureProjection,
    Wav2Vec2FeedForward,
    Wav2Vec2PositionalConvEmbedding,
    frame_mask,
)
from mobius_audio.models.whisper import WhisperForConditionalGeneration, _length

INT64 = ir.DataType.INT64


@dataclass
class SpeechT5Config(Wav2Vec2Config):
    """Wav2Vec2's fields for the speech prenet (``intermediate_size`` is the encoder's
    FFN width) and the encoder–decoder's."""

    #: The checkpoint class this config builds (``architectures`` names it).
    architecture: ClassVar[str] = "SpeechT5ForSpeechToText"
    encoder_layers: int = 12
    decoder_layers: int = 6
    encoder_heads: int = 12
    decoder_heads: int = 12
    decoder_ffn_dim: int = 3072
    encoder_max_relative_position: int = 160
    scale_embedding: bool = False
    pad_token_id: int = 1
    tie_word_embeddings: bool = True
    decoder_start_token_id: int | None = 2
    eos_token_id: int | list[int] | None = 2

    @classmethod
    def hf_fields(cls, hf: Any) -> dict[str, Any]:
        architectures = list(getattr(hf, "architectures", None) or [])
        if architectures and cls.architecture not in architectures:
            raise ConfigError(
                f"speecht5: {', '.join(map(str, architectures))} is not built as "
                f"{cls.architecture}; mobius builds SpeechT5ForSpeechToText and "
                "SpeechT5ForTextToSpeech, picked by architectures"
            )
        _check_positive(
            hf, "hidden_size", "encoder_layers", "decoder_layers", "encoder_attention_heads",
            "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "vocab_size",
            "encoder_max_relative_position", "num_conv_pos_embeddings",
            "num_conv_pos_embedding_groups",
        )  # fmt: skip
        if not isinstance(hf.pad_token_id, int) or hf.pad_token_id < 0:
            raise ConfigError(
                f"speecht5: positions count from pad_token_id; it is {hf.pad_token_id!r}"
            )
        d = hf.hidden_size
        if d % hf.encoder_attention_heads or d % hf.decoder_attention_heads:
            raise ConfigError("speecht5: hidden_size must split evenly into the heads")
        convs = [tuple(hf.conv_dim), tuple(hf.conv_kernel), tuple(hf.conv_stride)]
        if len({len(c) for c in convs}) != 1:
            raise ConfigError("speecht5: conv_dim, conv_kernel and conv_stride differ in length")
        if not all(isinstance(v, int) and v > 0 for conv in convs for v in conv):
            raise ConfigError(f"speecht5: conv sizes must be positive integers: {convs}")
        if hf.feat_extract_norm not in ("group", "layer"):
            raise ConfigError(f"speecht5: feat_extract_norm {hf.feat_extract_norm!r} is not built")
        return dict(
            model_type=hf.model_type,
            hidden_size=d,
            intermediate_size=hf.encoder_ffn_dim,
            num_hidden_layers=hf.encoder_layers,
            num_attention_heads=hf.encoder_attention_heads,
            hidden_act=hf.hidden_act,
            layer_norm_eps=float(hf.layer_norm_eps),
            conv_dim=convs[0],
            conv_kernel=convs[1],
            conv_stride=convs[2],
            conv_bias=bool(hf.conv_bias),
            feat_extract_norm=hf.feat_extract_norm,
            feat_extract_activation=hf.feat_extract_activation,
            num_conv_pos_embeddings=hf.num_conv_pos_embeddings,
            num_conv_pos_embedding_groups=hf.num_conv_pos_embedding_groups,
            vocab_size=hf.vocab_size,
            encoder_layers=hf.encoder_layers,
            decoder_layers=hf.decoder_layers,
            encoder_heads=hf.encoder_attention_heads,
            decoder_heads=hf.decoder_attention_heads,
            decoder_ffn_dim=hf.decoder_ffn_dim,
            encoder_max_relative_position=hf.encoder_max_relative_position,
            scale_embedding=bool(hf.scale_embedding),
            pad_token_id=hf.pad_token_id,
            tie_word_embeddings=bool(getattr(hf, "tie_word_embeddings", True)),
            decoder_start_token_id=hf.decoder_start_token_id,
            eos_token_id=hf.eos_token_id,
        )


def _check_positive(hf: Any, *names: str) -> None:
    for name in names:
        checked_int(getattr(hf, name, None), f"speecht5 {name}")


def add_sinusoids(op, x, padded, config: SpeechT5Config, past_length):
    """``x`` plus fairseq's sinusoids at the positions of the non-pad entries of ``padded``.

    ``padded`` is read as token ids against ``pad_token_id`` (transformers feeds its
    encoder the padding mask itself, 1 at padded frames), counting from ``past_length``.
    """
    positions = padding_aware_positions(op, padded, config.pad_token_id, past_length)
    table = sinusoids(op, positions, config.hidden_size, config.pad_token_id)
    return op.Add(x, op.CastLike(table, x))


class SpeechT5SpeechEncoderPrenet(nn.Module):
    """Wav2vec2's conv features, projection and position conv, then the sinusoids."""

    def __init__(self, config: SpeechT5Config) -> None:
        super().__init__()
        self.config = config
        self.feature_encoder = Wav2Vec2FeatureEncoder(config)
        self.feature_projection = Wav2Vec2FeatureProjection(config)
        self.pos_conv_embed = Wav2Vec2PositionalConvEmbedding(config)

    def forward(self, op, input_values, encoder_attention_mask):
        x = self.feature_projection(op, self.feature_encoder(op, input_values))
        x = op.Add(x, self.pos_conv_embed(op, x))  # over padded frames too, as transformers
        padded = op.Sub(op.Constant(value_int=1), encoder_attention_mask)
        return add_sinusoids(op, x, padded, self.config, op.Constant(value_int=0))


class SpeechT5RelativePositionalEncoding(nn.Module):
    """``pe_k`` ``[2 * max_length, head_dim]`` gathered at each query-minus-key distance."""

    def __init__(self, head_dim: int, max_length: int) -> None:
        super().__init__()
        self.pe_k = Embedding(2 * max_length, head_dim)
        self.max_length = max_length

    def forward(self, op, x):  # [batch, frames, hidden] -> [frames(q), frames(k), head_dim]
        frames = op.Squeeze(_length(op, x, 1), [0])
        index = op.Range(op.Constant(value_int=0), frames, op.Constant(value_int=1))
        distance = op.Sub(op.Unsqueeze(index, [1]), op.Unsqueeze(index, [0]))
        limit = self.max_length
        lowest, highest = op.Constant(value_int=-limit), op.Constant(value_int=limit - 1)
        distance = op.Min(op.Max(distance, lowest), highest)
        return self.pe_k(op, op.Add(distance, op.Constant(value_int=limit)))


class SpeechT5Attention(Wav2Vec2Attention):
    """Wav2vec2's attention plus the scaled query dotted with the relative position table."""

    def forward(self, op, x, bias, positions):
        q, k, v = self.q_proj(op, x), self.k_proj(op, x), self.v_proj(op, x)
        heads = op.Reshape(q, [0, 0, self.num_heads, -1])  # [b, f(q), h, head_dim]
        per_query = op.Transpose(heads, perm=[1, 0, 2, 3])  # [f(q), b, h, head_dim]
        table = op.Unsqueeze(op.Transpose(positions, perm=[0, 2, 1]), [1])  # [f(q), 1, d, f(k)]
        scores = op.Transpose(op.MatMul(per_query, table), perm=[1, 2, 0, 3])  # [b, h, f, f]
        scale = op.CastLike(op.Constant(value=ir.tensor(np.array(self.scale, np.float32))), q)
        bias = op.Add(bias, op.Mul(scores, scale))
        out = bidirectional_attention(op, q, k, v, bias, self.num_heads, self.scale)
        return self.out_proj(op, out)


class SpeechT5EncoderLayer(Wav2Vec2EncoderLayer):
    """Wav2vec2's post-LN layer (same names) with the relative position bias in its attention."""

    attention_class = SpeechT5Attention

    def forward(self, op, x, bias, positions):
        x = self.layer_norm(op, op.Add(x, self.attention(op, x, bias, positions)))
        return self.final_layer_norm(op, op.Add(x, self.feed_forward(op, x)))


class SpeechT5Encoder(nn.Module):
    """The prenet, a LayerNorm, then the layers over the padding-masked frames (or tokens).

    The prenet takes ``(source, attention_mask)``: the speech prenet here, the text
    prenet of :mod:`mobius_audio.models.speecht5_tts` in its subclass.
    """

    prenet_class: ClassVar[type] = SpeechT5SpeechEncoderPrenet

    def __init__(self, config: SpeechT5Config) -> None:
        super().__init__()
        d, heads = config.hidden_size, config.encoder_heads
        self.prenet = self.prenet_class(config)
        self.layer_norm = LayerNorm(d, config.layer_norm_eps)
        self.layers = nn.ModuleList(
            [SpeechT5EncoderLayer(config) for _ in range(config.encoder_layers)]
        )
        self.embed_positions = SpeechT5RelativePositionalEncoding(
            d // heads, config.encoder_max_relative_position
        )

    def forward(self, op, input_values, encoder_attention_mask):
        x = self.layer_norm(op, self.prenet(op, input_values, encoder_attention_mask))
        bias = padding_bias(op, encoder_attention_mask, x.dtype or ir.DataType.FLOAT)
        positions = self.embed_positions(op, x)  # shared by every layer
        for layer in self.layers:
            x = layer(op, x, bias, positions)
        return x


class SpeechT5DecoderLayer(nn.Module):
    """Post-LN: self-attention through the cache, cross-attention, then wav2vec2's feed-forward."""

    def __init__(self, config: SpeechT5Config) -> None:
        super().__init__()
        d, heads, eps = config.hidden_size, config.decoder_heads, config.layer_norm_eps
        self.self_attn = Seq2SeqAttention(d, heads)
        self.self_attn_layer_norm = LayerNorm(d, eps)
        self.encoder_attn = CrossAttention(d, heads)
        self.encoder_attn_layer_norm = LayerNorm(d, eps)
        ffn = dataclasses.replace(config, intermediate_size=config.decoder_ffn_dim)
        self.feed_forward = Wav2Vec2FeedForward(ffn)
        self.final_layer_norm = LayerNorm(d, eps)

    def forward(self, op, x, causal, cross_bias, cross, past):
        h, present = self.self_attn(op, x, causal, *past)
        x = self.self_attn_layer_norm(op, op.Add(x, h))
        h = self.encoder_attn(op, x, cross_bias, *cross)
        x = self.encoder_attn_layer_norm(op, op.Add(x, h))
        return self.final_layer_norm(op, op.Add(x, self.feed_forward(op, x))), present


class SpeechT5TextDecoder(nn.Module):
    """The text prenet (scaled embeddings, sinusoids) and the layers; no final norm."""

    def __init__(self, config: SpeechT5Config) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [SpeechT5DecoderLayer(config) for _ in range(config.decoder_layers)]
        )

    def forward(self, op, input_ids, encoder_attention_mask, self_cache, cross_cache):
        config = self.config
        x = self.embed_tokens(op, input_ids)
        if config.scale_embedding:
            x = op.Mul(x, math.sqrt(config.hidden_size))
        x = add_sinusoids(op, x, input_ids, config, _length(op, self_cache[0][0], 2))
        return decode_layers(op, self.layers, x, encoder_attention_mask, self_cache, cross_cache)


def decode_layers(op, layers, x, encoder_attention_mask, self_cache, cross_cache):
    """``x [batch, steps, hidden]`` through the decoder layers and their caches: ``(x, presents)``.

    Causal over the cache and the new steps; the cross-attention masks the source's padding.
    """
    causal = causal_bias(op, x, self_cache[0][0], x.dtype)
    cross_bias = padding_bias(op, encoder_attention_mask, x.dtype, queries=x)
    presents = []
    for layer, past, cross in zip(layers, self_cache, cross_cache, strict=True):
        x, present = layer(op, x, causal, cross_bias, cross, past)
        presents.append(present)
    return x, presents


class SpeechT5Model(nn.Module):
    def __init__(self, config: SpeechT5Config) -> None:
        super().__init__()
        self.encoder = SpeechT5Encoder(config)
        self.decoder = SpeechT5TextDecoder(config)


class SpeechT5ForSpeechToText(WhisperForConditionalGeneration):
    """``model`` (speech encoder, text decoder) and ``lm_head``, tied to the decoder's embeddings."""

    config_class = SpeechT5Config
    model_class = SpeechT5Model
    head_name = "lm_head"
    #: Checkpoint prefixes and the module tree's (the tree is Whisper's, see the module docstring).
    RENAMES = (
        ("speecht5.encoder.wrapped_encoder.", "model.encoder."),
        ("speecht5.encoder.prenet.", "model.encoder.prenet."),
        ("speecht5.decoder.wrapped_decoder.", "model.decoder."),
        ("speecht5.decoder.prenet.", "model.decoder."),
        ("text_decoder_postnet.lm_head.", "lm_head."),
    )
    # The training-only mask embedding and sinusoid tables older checkpoints saved.
    ignored = (
        "model.encoder.prenet.masked_spec_embed",
        "model.encoder.prenet.pos_sinusoidal_embed.weights",
        "model.decoder.embed_positions.weights",
    )

    def speech_input(self) -> tuple[str, list]:
        """The extractor's waveform (normalised when its ``do_normalize``)."""
        return "input_values", ["batch", "samples"]

    def encoder_attention_mask(self, op, input_values, attention_mask):
        """The sample mask through every conv's ``(length - kernel) // stride + 1``, as transformers."""
        config = self.config
        frames = _length(op, input_values, 1)
        for kernel, stride in zip(config.conv_kernel, config.conv_stride, strict=True):
            frames = op.Add(op.Div(op.Sub(frames, kernel), stride), 1)
        return op.Cast(frame_mask(op, attention_mask, config, frames), to=INT64)

    def sanitize(self, weights: dict) -> dict:
        """The checkpoint's prefixes renamed; weight-norm tensors under both spellings; tying."""
        out = {}
        for key, value in weights.items():
            for old, new in self.RENAMES:
                if key.startswith(old):
                    key = new + key[len(old) :]
                    break
            key = key.replace("parametrizations.weight.original0", "weight_g")
            out[key.replace("parametrizations.weight.original1", "weight_v")] = value
        return super().sanitize(out)


MODEL_TYPES = {"speecht5": SpeechT5ForSpeechToText}
