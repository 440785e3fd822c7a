"""MusicGen: a T5 text encoder, a decoder over several EnCodec codebooks, and EnCodec's decoder.

``MusicgenForConditionalGeneration`` checkpoints hold three models under their own
prefixes, and the module tree keeps them (``text_encoder.*``, ``enc_to_dec_proj.*``,
``decoder.model.decoder.*`` with ``decoder.lm_heads.*``, ``audio_encoder.*``):

- ``text_encoder``: mobius-text's T5 encoder (``T5EncoderModel``, found through the
  registry), then ``enc_to_dec_proj`` when its width is not the decoder's, and the
  states of padded tokens zeroed, as transformers' forward does;
- ``decoder``: a pre-norm decoder whose input at each step is one code per codebook:
  the codebooks' embeddings are summed, sinusoidal positions (cosines first, then
  sines) added, and each layer runs causal self-attention, cross-attention over the
  text and a GELU MLP (no projection has a bias); one ``lm_heads.{k}`` per codebook;
- ``audio_encoder``: the EnCodec of :mod:`mobius_audio.models.encodec`, of which
  the graphs use the quantizer's codebooks and the decoder (its encoder is left out
  by name: MusicGen generates codes, it does not encode audio).

Stereo checkpoints (``audio_channels=2``) interleave the left and right channels'
codebooks; the audio decoder decodes each half with the same EnCodec and stacks
them. The contract is :mod:`mobius_audio.tasks_music`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius import registry
from mobius.components import (
    CrossAttention,
    Embedding,
    LayerNorm,
    Linear,
    Seq2SeqAttention,
    causal_bias,
    get_activation,
    module_scope,
    padding_bias,
)
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_audio.models._checks import checked_int
from mobius_audio.models._codec import fold_weight_norm
from mobius_audio.models.encodec import EncodecConfig, EncodecModel

TEXT_PREFIX = "text_encoder."


def _t5_encoder_class():
    """mobius-text's T5 encoder (``T5EncoderModel``), through the registry."""
    try:
        return registry.get("T5EncoderModel").module_class()
    except Exception as exc:  # the registry's own error names what is missing
        reason = " ".join(str(exc).split())
        raise ConfigError(
            f"MusicGen's text encoder is mobius-text's T5 (pip install mobius-text): {reason}"
        ) from None


def _count(section: Any, name: str, where: str) -> int:
    return checked_int(getattr(section, name, None), f"musicgen {where}.{name}")


@dataclass
class MusicgenConfig:
    """The decoder's sizes and ids, with the text encoder's and the codec's configs."""

    model_type: str
    text: Any  # mobius-text's T5EncoderConfig
    codec: EncodecConfig
    project_text: bool  # enc_to_dec_proj: the text encoder's width is not the decoder's
    vocab_size: int  # codes per codebook; the embeddings have one more row (the pad id)
    hidden_size: int
    ffn_dim: int
    num_layers: int
    num_heads: int
    num_codebooks: int
    audio_channels: int
    activation: str
    scale_embedding: bool
    pad_token_id: int

    @classmethod
    def from_hf(cls, hf: Any) -> MusicgenConfig:
        decoder = hf.decoder
        text_config = _t5_encoder_class().config_class.from_hf(hf.text_encoder)
        codec = EncodecConfig.from_hf(hf.audio_encoder)
        hidden = _count(decoder, "hidden_size", "decoder")
        heads = _count(decoder, "num_attention_heads", "decoder")
        if hidden % heads:
            raise ConfigError(
                f"musicgen decoder: hidden_size {hidden} is not a multiple of {heads}"
            )
        channels = decoder.audio_channels
        if channels not in (1, 2):
            raise ConfigError(f"musicgen decoder.audio_channels {channels!r}: 1 or 2")
        codebooks = _count(decoder, "num_codebooks", "decoder")
        if codebooks % channels or codebooks // channels > codec.n_codebooks:
            raise ConfigError(
                f"musicgen: {codebooks} codebooks over {channels} channel(s), but the EnCodec "
                f"has {codec.n_codebooks} quantizer stages"
            )
        vocab = _count(decoder, "vocab_size", "decoder")
        if vocab != codec.codebook_size:
            raise ConfigError(
                f"musicgen: the decoder's vocab_size {vocab} is not the EnCodec codebook_size "
                f"{codec.codebook_size}"
            )
        cross = getattr(decoder, "cross_attention_hidden_size", None)
        project = text_config.hidden_size != hidden
        if project and cross is not None:  # transformers' decoder would not run it either
            raise ConfigError(
                f"musicgen: cross_attention_hidden_size {cross} with a text encoder of width "
                f"{text_config.hidden_size} and a decoder of width {hidden} is not built"
            )
        pad = decoder.pad_token_id
        if isinstance(pad, bool) or not isinstance(pad, int) or not 0 <= pad <= vocab:
            raise ConfigError(f"musicgen decoder.pad_token_id {pad!r} is not in 0..{vocab}")
        return cls(
            model_type=hf.model_type,
            text=text_config,
            codec=codec,
            project_text=project,
            vocab_size=vocab,
            hidden_size=hidden,
            ffn_dim=_count(decoder, "ffn_dim", "decoder"),
            num_layers=_count(decoder, "num_hidden_layers", "decoder"),
            num_heads=heads,
            num_codebooks=codebooks,
            audio_channels=channels,
            activation=decoder.activation_function,
            scale_embedding=bool(decoder.scale_embedding),
            pad_token_id=pad,
        )


def sinusoidal_positions(op, start, length, dim: int):
    """``[length, dim]``: transformers' MusicGen table rows ``start .. start + length - 1``.

    Cosines, then sines, of ``position * exp(-i * ln(10000) / (dim/2 - 1))``, in
    float32 as torch computes them; an odd ``dim`` ends with a zero column.
    """
    half = dim // 2
    step = np.float32(-math.log(10000) / (half - 1))
    frequencies = np.exp(np.arange(half, dtype=np.float32) * step).astype(np.float32)
    positions = op.Cast(op.Range(start, op.Add(start, length), op.Constant(value_int=1)), to=1)
    angles = op.Mul(op.Unsqueeze(positions, [1]), op.Constant(value=ir.tensor(frequencies[None])))
    parts = [op.Cos(angles), op.Sin(angles)]
    if dim % 2:
        parts.append(op.Mul(op.Slice(angles, [0], [1], [1]), op.Constant(value_float=0.0)))
    return op.Concat(*parts, axis=1)


class MusicgenSelfAttentionLayer(nn.Module):
    """Pre-norm: causal self-attention, then the MLP (MusicGen-Melody's whole layer)."""

    def __init__(self, config: MusicgenConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.self_attn = Seq2SeqAttention(d, config.num_heads, bias=False)
        self.self_attn_layer_norm = LayerNorm(d, 1e-5)
        self.fc1 = Linear(d, config.ffn_dim)
        self.fc2 = Linear(config.ffn_dim, d)
        self.final_layer_norm = LayerNorm(d, 1e-5)
        self.act = get_activation(config.activation)

    def attend(self, op, x, causal, past):
        h, present = self.self_attn(op, self.self_attn_layer_norm(op, x), causal, *past)
        return op.Add(x, h), present

    def mlp(self, op, x):
        h = self.fc2(op, self.act(op, self.fc1(op, self.final_layer_norm(op, x))))
        return op.Add(x, h)

    def forward(self, op, x, causal, past):
        x, present = self.attend(op, x, causal, past)
        return self.mlp(op, x), present


class MusicgenDecoderLayer(MusicgenSelfAttentionLayer):
    """Self-attention, cross-attention over the text, then the MLP."""

    def __init__(self, config: MusicgenConfig) -> None:
        super().__init__(config)
        self.encoder_attn = CrossAttention(config.hidden_size, config.num_heads, bias=False)
        self.encoder_attn_layer_norm = LayerNorm(config.hidden_size, 1e-5)

    def forward(self, op, x, causal, past, cross_bias, cross):
        x, present = self.attend(op, x, causal, past)
        h = self.encoder_attn(op, self.encoder_attn_layer_norm(op, x), cross_bias, *cross)
        return self.mlp(op, op.Add(x, h)), present


class MusicgenDecoder(nn.Module):
    """Codebook embeddings summed, sinusoidal positions from the cache length, the layers."""

    layer_class = MusicgenDecoderLayer

    def __init__(self, config: MusicgenConfig) -> None:
        super().__init__()
        self.config = config
        rows = config.vocab_size + 1  # the codes and the pad / start id
        self.embed_tokens = nn.ModuleList(
            [Embedding(rows, config.hidden_size) for _ in range(config.num_codebooks)]
        )
        self.layers = nn.ModuleList([self.layer_class(config) for _ in range(config.num_layers)])
        self.layer_norm = LayerNorm(config.hidden_size, 1e-5)

    def embed(self, op, codes):
        """``codes [batch, codebooks, seq]`` -> the sum of each codebook's rows ``[batch, seq, d]``."""
        x = None
        for k, embed in enumerate(self.embed_tokens):
            rows = embed(op, op.Gather(codes, op.Constant(value_int=k), axis=1))
            x = rows if x is None else op.Add(x, rows)
        if self.config.scale_embedding:
            x = op.Mul(x, op.Constant(value_float=math.sqrt(self.config.hidden_size)))
        return x

    def run_layers(self, op, x, self_cache, *layer_inputs):
        """Positions added (counting on from the cache), the layers, the final norm."""
        past = op.Squeeze(op.Shape(self_cache[0][0], start=2, end=3), [0])
        seq = op.Squeeze(op.Shape(x, start=1, end=2), [0])
        x = op.Add(x, sinusoidal_positions(op, past, seq, self.config.hidden_size))
        causal = causal_bias(op, x, self_cache[0][0], ir.DataType.FLOAT)
        presents = []
        for i, (layer, past_kv) in enumerate(zip(self.layers, self_cache, strict=True)):
            x, present = layer(op, x, causal, past_kv, *(inputs[i] for inputs in layer_inputs))
            presents.append(present)
        return self.layer_norm(op, x), presents

    def forward(self, op, codes, encoder_attention_mask, self_cache, cross_cache):
        """States ``[batch, seq, hidden]`` of ``codes`` and the self-attention presents."""
        x = self.embed(op, codes)
        cross_bias = padding_bias(op, encoder_attention_mask, ir.DataType.FLOAT, queries=x)
        biases = [cross_bias] * len(self.layers)
        return self.run_layers(op, x, self_cache, biases, cross_cache)


class MusicgenModel(nn.Module):
    decoder_class = MusicgenDecoder

    def __init__(self, config: MusicgenConfig) -> None:
        super().__init__()
        self.decoder = self.decoder_class(config)

    def forward(self, op, *inputs):
        return self.decoder(op, *inputs)


class MusicgenForCausalLM(nn.Module):
    """The decoder and one LM head per codebook: logits ``[batch, codebooks, seq, vocab]``."""

    model_class = MusicgenModel

    def __init__(self, config: MusicgenConfig) -> None:
        super().__init__()
        self.model = self.model_class(config)
        self.lm_heads = nn.ModuleList(
            [Linear(config.hidden_size, config.vocab_size) for _ in range(config.num_codebooks)]
        )

    def forward(self, op, *inputs):
        hidden, presents = self.model(op, *inputs)
        logits = [op.Unsqueeze(head(op, hidden), [1]) for head in self.lm_heads]
        return op.Concat(*logits, axis=1), presents


class MusicgenForConditionalGeneration(Model):
    """The text-to-music hooks (:mod:`mobius_audio.tasks_music`): ``encode_text``,
    ``decode``, ``decode_audio`` and ``cache_shapes``."""

    config_class = MusicgenConfig
    task = "text-to-music"
    decoder_class = MusicgenForCausalLM
    #: The position table hub checkpoints still carry (older transformers saved it; the graph
    #: computes the same sinusoids), the EnCodec's encoder and its codebooks' training
    #: state (MusicGen only decodes codes).
    ignored = (
        "decoder.model.decoder.embed_positions.weights",
        "audio_encoder.encoder.*",
        "audio_encoder.quantizer.layers.*.codebook.inited",
        "audio_encoder.quantizer.layers.*.codebook.cluster_size",
        "audio_encoder.quantizer.layers.*.codebook.embed_avg",
    )

    def __init__(self, config: MusicgenConfig) -> None:
        super().__init__()
        self.config = config
        self.text_encoder = _t5_encoder_class()(config.text)
        if config.project_text:
            self.enc_to_dec_proj = Linear(config.text.hidden_size, config.hidden_size, bias=True)
        self.decoder = self.decoder_class(config)
        self.audio_encoder = EncodecModel(config.codec)

    def cache_shapes(self) -> tuple[int, int, int]:
        """``(layers, heads, head_dim)`` of the decoder's self- and cross-attention caches."""
        config = self.config
        return config.num_layers, config.num_heads, config.hidden_size // config.num_heads

    def encode_text(self, op, input_ids, attention_mask):
        """The text states the decoder reads (projected, padding zeroed) and each decoder
        layer's cross-attention ``(key, value)``, computed once."""
        states = self.text_encoder(op, input_ids, attention_mask)["last_hidden_state"]
        if self.config.project_text:
            states = self.enc_to_dec_proj(op, states)
        states = op.Mul(states, op.Unsqueeze(op.Cast(attention_mask, to=1), [2]))
        lm = self.decoder
        decoder = lm.model.decoder
        cross = []
        for layer in decoder.layers:
            with module_scope(op, lm, lm.model, decoder, layer, layer.encoder_attn):
                cross.append(layer.encoder_attn.project_kv(op, states))
        return states, cross

    def decode(self, op, codes, encoder_attention_mask, self_cache, cross_cache):
        """Logits ``[batch, codebooks, seq, vocab]`` and the self-attention presents."""
        return self.decoder(op, codes, encoder_attention_mask, self_cache, cross_cache)

    def decode_audio(self, op, audio_codes):
        """``[batch, codebooks, frames]`` -> ``[batch, audio_channels, samples]``; stereo
        codebooks alternate left and right, each half decoded by the same EnCodec."""
        codec = self.audio_encoder
        with module_scope(op, codec):
            if self.config.audio_channels == 1:
                return codec.decode(op, audio_codes)
            count = op.Shape(audio_codes, start=1, end=2)
            halves = []
            for first in (0, 1):
                stage_codes = op.Slice(audio_codes, [first], count, [1], [2])
                halves.append(codec.decode(op, stage_codes))
            return op.Concat(*halves, axis=1)

    def sanitize(self, weights: dict) -> dict:
        """The T5 encoder's own renames under its prefix; EnCodec's weight norm folded."""
        text = {k[len(TEXT_PREFIX) :]: v for k, v in weights.items() if k.startswith(TEXT_PREFIX)}
        others = {k: v for k, v in weights.items() if not k.startswith(TEXT_PREFIX)}
        text = self.text_encoder.sanitize(text)
        return fold_weight_norm({**others, **{TEXT_PREFIX + k: v for k, v in text.items()}})


MODEL_TYPES = {"musicgen": MusicgenForConditionalGeneration}
