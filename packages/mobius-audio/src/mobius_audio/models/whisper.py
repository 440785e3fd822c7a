"""Whisper: a convolutional front end over log-mel features, a pre-norm encoder and a cached decoder.

Two 3-wide convolutions (the second with stride 2) with exact GELU turn
``[batch, mel, frames]`` into ``frames / 2`` states; the encoder's position table
(sinusoids when transformers initialises it, but stored in every checkpoint) is
added, then pre-norm layers and a final ``layer_norm``. The decoder adds learned
positions, continuing from the cache length, to the token embeddings; each layer
has causal self-attention, cross-attention over the encoder and an MLP. Keys are
projected without a bias (queries, values and outputs have one). ``proj_out`` is
tied to the decoder's embeddings. The module tree follows
``WhisperForConditionalGeneration`` checkpoints (``model.encoder.conv1...``);
graphs follow :class:`mobius_audio.tasks.SpeechToTextTask`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import (
    CrossAttention,
    Embedding,
    LayerNorm,
    Linear,
    Seq2SeqAttention,
    TiedLMHead,
    causal_bias,
    get_activation,
    module_scope,
)
from mobius.model import Model


@dataclass
class WhisperConfig:
    model_type: str
    vocab_size: int
    hidden_size: int  # d_model
    encoder_layers: int
    decoder_layers: int
    encoder_heads: int
    decoder_heads: int
    encoder_ffn_dim: int
    decoder_ffn_dim: int
    num_mel_bins: int
    max_source_positions: int  # encoder states: frames / 2
    max_target_positions: int
    act: str = "gelu"
    tie_word_embeddings: bool = True
    decoder_start_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    @classmethod
    def from_hf(cls, hf: Any) -> WhisperConfig:
        return cls(**cls.hf_fields(hf))

    @staticmethod
    def features_per_frame(hf: Any) -> int:
        """The source's features per frame: Whisper's mel bins."""
        return hf.num_mel_bins

    @classmethod
    def hf_fields(cls, hf: Any) -> dict[str, Any]:
        """The fields read from a transformers config; variants extend or override them."""
        return dict(
            model_type=hf.model_type,
            vocab_size=hf.vocab_size,
            hidden_size=hf.d_model,
            encoder_layers=hf.encoder_layers,
            decoder_layers=hf.decoder_layers,
            encoder_heads=hf.encoder_attention_heads,
            decoder_heads=hf.decoder_attention_heads,
            encoder_ffn_dim=hf.encoder_ffn_dim,
            decoder_ffn_dim=hf.decoder_ffn_dim,
            num_mel_bins=cls.features_per_frame(hf),
            max_source_positions=hf.max_source_positions,
            max_target_positions=hf.max_target_positions,
            act=hf.activation_function,
            tie_word_embeddings=bool(getattr(hf, "tie_word_embeddings", True)),
            decoder_start_token_id=hf.decoder_start_token_id,
            eos_token_id=hf.eos_token_id,
        )


class Conv1d(nn.Module):
    """``Conv`` over ``[batch, channels, time]`` with the checkpoint's ``weight [out, in, k]`` and bias."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: int = 1) -> None:
        super().__init__()
        self.weight = nn.Parameter([out_channels, in_channels, kernel])
        self.bias = nn.Parameter([out_channels])
        self.kernel, self.stride = kernel, stride

    def forward(self, op, x):
        pad = self.kernel // 2
        return op.Conv(
            x, self.weight, self.bias, kernel_shape=[self.kernel], strides=[self.stride],
            pads=[pad, pad],
        )  # fmt: skip


class WhisperEncoderLayer(nn.Module):
    """Pre-norm: normalise, transform, add; for self-attention, then the MLP."""

    def __init__(self, config: WhisperConfig, heads: int, ffn_dim: int) -> None:
        super().__init__()
        d = config.hidden_size
        self.self_attn = Seq2SeqAttention(d, heads, key_bias=False)
        self.self_attn_layer_norm = LayerNorm(d, 1e-5)
        self.fc1 = Linear(d, ffn_dim, bias=True)
        self.fc2 = Linear(ffn_dim, d, bias=True)
        self.final_layer_norm = LayerNorm(d, 1e-5)
        self.act = get_activation(config.act)

    def mlp(self, op, x):
        return self.fc2(op, self.act(op, self.fc1(op, self.final_layer_norm(op, x))))

    def forward(self, op, x):
        x = op.Add(x, self.self_attn(op, self.self_attn_layer_norm(op, x)))
        return op.Add(x, self.mlp(op, x))


class WhisperDecoderLayer(WhisperEncoderLayer):
    def __init__(self, config: WhisperConfig, heads: int, ffn_dim: int) -> None:
        super().__init__(config, heads, ffn_dim)
        self.encoder_attn = CrossAttention(config.hidden_size, heads, key_bias=False)
        self.encoder_attn_layer_norm = LayerNorm(config.hidden_size, 1e-5)

    def forward(self, op, x, causal, cross, past):
        h, present = self.self_attn(op, self.self_attn_layer_norm(op, x), causal, *past)
        x = op.Add(x, h)
        h = self.encoder_attn(op, self.encoder_attn_layer_norm(op, x), None, *cross)  # no mask
        x = op.Add(x, h)
        return op.Add(x, self.mlp(op, x)), present


class PositionTable(Embedding):
    """A position table read as rows ``start .. end - 1`` (1-D int64 bounds), not gathered per id."""

    def forward(self, op, start, end):
        return op.Slice(self.weight, start, end, [0])  # [end - start, dim]


def _length(op, x, axis: int):
    """The size of ``x``'s ``axis`` as a 1-D int64 tensor ``[1]``."""
    return op.Shape(x, start=axis, end=axis + 1)


class WhisperEncoder(nn.Module):
    def __init__(self, config: WhisperConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.conv1 = Conv1d(config.num_mel_bins, d, 3)
        self.conv2 = Conv1d(d, d, 3, stride=2)
        self.embed_positions = PositionTable(config.max_source_positions, d)
        layers = [
            WhisperEncoderLayer(config, config.encoder_heads, config.encoder_ffn_dim)
            for _ in range(config.encoder_layers)
        ]
        self.layers = nn.ModuleList(layers)
        self.layer_norm = LayerNorm(d, 1e-5)

    def forward(self, op, input_features):
        x = op.Gelu(self.conv1(op, input_features), approximate="none")  # [batch, d, frames]
        x = op.Gelu(self.conv2(op, x), approximate="none")  # [batch, d, frames / 2]
        x = op.Transpose(x, perm=[0, 2, 1])  # [batch, states, d]
        # transformers adds the whole table (and insists on frames = 2 * its rows); the
        # slice is the same there and lets a shorter window through.
        zero = op.Constant(value_ints=[0])
        x = op.Add(x, self.embed_positions(op, zero, _length(op, x, 1)))
        for layer in self.layers:
            x = layer(op, x)
        return self.layer_norm(op, x)


class WhisperDecoder(nn.Module):
    def __init__(self, config: WhisperConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.embed_tokens = Embedding(config.vocab_size, d)
        self.embed_positions = PositionTable(config.max_target_positions, d)
        layers = [
            WhisperDecoderLayer(config, config.decoder_heads, config.decoder_ffn_dim)
            for _ in range(config.decoder_layers)
        ]
        self.layers = nn.ModuleList(layers)
        self.layer_norm = LayerNorm(d, 1e-5)

    def forward(self, op, input_ids, self_cache, cross_cache):
        past = _length(op, self_cache[0][0], 2)
        end = op.Add(past, _length(op, input_ids, 1))
        positions = self.embed_positions(op, past, end)  # [seq, d]
        x = op.Add(self.embed_tokens(op, input_ids), positions)  # no embedding scale, as HF
        causal = causal_bias(op, input_ids, self_cache[0][0], x.dtype)  # [batch, 1, seq, total]
        presents = []
        for layer, past_kv, cross in zip(self.layers, self_cache, cross_cache, strict=True):
            x, present = layer(op, x, causal, cross, past_kv)
            presents.append(present)
        return self.layer_norm(op, x), presents


class WhisperModel(nn.Module):
    def __init__(self, config: WhisperConfig) -> None:
        super().__init__()
        self.encoder = WhisperEncoder(config)
        self.decoder = WhisperDecoder(config)


class WhisperForConditionalGeneration(Model):
    """``model`` (encoder, decoder) and ``proj_out``, tied to the decoder's embeddings.

    The speech seq2seq families subclass it with their own ``model_class`` and
    output head's name; those that mask padding (Speech2Text, Moonshine) add
    ``speech_input`` and ``encoder_attention_mask``, and their encoder and decoder
    take the mask after the source and the ids.
    """

    config_class = WhisperConfig
    task = "speech-to-text"
    model_class = WhisperModel
    head_name = "proj_out"

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        self.model = self.model_class(config)
        embeddings = self.model.decoder.embed_tokens
        head = (
            TiedLMHead(embeddings)
            if config.tie_word_embeddings
            else Linear(config.hidden_size, config.vocab_size)
        )
        setattr(self, self.head_name, head)

    def cache_shapes(self) -> tuple[int, int, int]:
        config = self.config
        return (
            config.decoder_layers,
            config.decoder_heads,
            config.hidden_size // config.decoder_heads,
        )

    def encode(self, op, source, *encoder_attention_mask):
        """The encoder's states and every decoder layer's cross-attention ``(key, value)``."""
        decoder = self.model.decoder
        with module_scope(op, self.model):
            hidden = self.model.encoder(op, source, *encoder_attention_mask)
            cross = []
            for layer in decoder.layers:  # computed once here, read at every decoder step
                with module_scope(op, decoder, layer, layer.encoder_attn):
                    cross.append(layer.encoder_attn.project_kv(op, hidden))
        return hidden, cross

    def decode(self, op, input_ids, *decoder_inputs):
        """Logits and the self-attention presents; ``decoder_inputs``: (mask,) self, cross caches."""
        with module_scope(op, self):
            with module_scope(op, self.model):
                hidden, presents = self.model.decoder(op, input_ids, *decoder_inputs)
            logits = getattr(self, self.head_name)(op, hidden)
        return logits, presents

    def sanitize(self, weights: dict) -> dict:
        """A tied head reads the decoder's embeddings (checkpoints may still carry a copy)."""
        if self.config.tie_word_embeddings:
            weights.pop(f"{self.head_name}.weight", None)
        return weights


MODEL_TYPES = {"whisper": WhisperForConditionalGeneration}
