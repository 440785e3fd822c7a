"""BART: a post-norm encoder–decoder with learned positions (offset by 2) and an embedding LayerNorm.

The lineage (mBART, PLBART, Marian, Pegasus, Blenderbot, M2M-100...) differs in
where the norms sit (pre-norm layers and a final ``layer_norm`` per stack), in the
positions (learned, fixed sinusoids, padding-aware) and in the embedding scale;
each variant subclasses the stack or layer it changes. The module tree follows
``*ForConditionalGeneration`` checkpoints (``model.encoder.layers.0.self_attn...``).
Graphs follow :class:`mobius.tasks._seq2seq.Seq2SeqTask`; the decoder alone
(``BartForCausalLM``, ``model.decoder...``) is a causal LM (:class:`BartForCausalLM`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from onnxscript import nn

from mobius.components import (
    CrossAttention,
    Embedding,
    LayerNorm,
    Linear,
    Seq2SeqAttention,
    TiedLMHead,
    attention_bias,
    causal_bias,
    get_activation,
    module_scope,
    padding_bias,
)
from mobius.model import Model


@dataclass
class BartConfig:
    model_type: str
    vocab_size: int
    hidden_size: int  # d_model
    encoder_layers: int
    decoder_layers: int
    encoder_heads: int
    decoder_heads: int
    encoder_ffn_dim: int
    decoder_ffn_dim: int
    max_position_embeddings: int
    act: str = "gelu"
    scale_embedding: bool = False
    tie_word_embeddings: bool = True
    pad_token_id: int | None = 1
    decoder_start_token_id: int | None = 2
    eos_token_id: int | list[int] | None = 2

    @classmethod
    def from_hf(cls, hf: Any) -> BartConfig:
        return cls(
            model_type=hf.model_type,
            vocab_size=hf.vocab_size,
            hidden_size=hf.d_model,
            encoder_layers=hf.encoder_layers,
            decoder_layers=hf.decoder_layers,
            encoder_heads=hf.encoder_attention_heads,
            decoder_heads=hf.decoder_attention_heads,
            encoder_ffn_dim=hf.encoder_ffn_dim,
            decoder_ffn_dim=hf.decoder_ffn_dim,
            max_position_embeddings=hf.max_position_embeddings,
            act=hf.activation_function,
            scale_embedding=bool(getattr(hf, "scale_embedding", False)),
            tie_word_embeddings=bool(getattr(hf, "tie_word_embeddings", True)),
            pad_token_id=hf.pad_token_id,
            # PLBART's causal-LM config has none (a decoder alone starts from the prompt)
            decoder_start_token_id=getattr(hf, "decoder_start_token_id", None),
            eos_token_id=hf.eos_token_id,
        )


class BartEncoderLayer(nn.Module):
    """Post-norm: each sub-block's output is added to its input, then normalised."""

    def __init__(self, config: BartConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.self_attn = Seq2SeqAttention(d, config.encoder_heads)
        self.self_attn_layer_norm = LayerNorm(d, 1e-5)
        self.fc1 = Linear(d, config.encoder_ffn_dim, bias=True)
        self.fc2 = Linear(config.encoder_ffn_dim, d, bias=True)
        self.final_layer_norm = LayerNorm(d, 1e-5)
        self.act = get_activation(config.act)

    def mlp(self, op, x):
        return self.fc2(op, self.act(op, self.fc1(op, x)))

    def forward(self, op, x, bias):
        x = self.self_attn_layer_norm(op, op.Add(x, self.self_attn(op, x, bias)))
        return self.final_layer_norm(op, op.Add(x, self.mlp(op, x)))


class BartDecoderLayer(BartEncoderLayer):
    def __init__(self, config: BartConfig) -> None:
        super().__init__(config)
        d = config.hidden_size
        self.self_attn = Seq2SeqAttention(d, config.decoder_heads)
        self.encoder_attn = CrossAttention(d, config.decoder_heads)
        self.encoder_attn_layer_norm = LayerNorm(d, 1e-5)
        self.fc1 = Linear(d, config.decoder_ffn_dim, bias=True)
        self.fc2 = Linear(config.decoder_ffn_dim, d, bias=True)

    def forward(self, op, x, causal, cross, past):
        """``cross`` is ``None`` for the decoder alone (a causal LM): no encoder states."""
        h, present = self.self_attn(op, x, causal, *past)
        x = self.self_attn_layer_norm(op, op.Add(x, h))
        if cross is not None:
            cross_bias, key, value = cross
            h = self.encoder_attn(op, x, cross_bias, key, value)
            x = self.encoder_attn_layer_norm(op, op.Add(x, h))
        return self.final_layer_norm(op, op.Add(x, self.mlp(op, x))), present


class PreNormEncoderLayer(BartEncoderLayer):
    """Pre-norm (mBART, Pegasus, Blenderbot, M2M-100): normalise, transform, add."""

    def forward(self, op, x, bias):
        x = op.Add(x, self.self_attn(op, self.self_attn_layer_norm(op, x), bias))
        return op.Add(x, self.mlp(op, self.final_layer_norm(op, x)))


class PreNormDecoderLayer(BartDecoderLayer):
    def forward(self, op, x, causal, cross, past):
        h, present = self.self_attn(op, self.self_attn_layer_norm(op, x), causal, *past)
        x = op.Add(x, h)
        if cross is not None:  # None: the decoder alone (a causal LM)
            cross_bias, key, value = cross
            h = self.encoder_attn(op, self.encoder_attn_layer_norm(op, x), cross_bias, key, value)
            x = op.Add(x, h)
        return op.Add(x, self.mlp(op, self.final_layer_norm(op, x))), present


class BartLearnedPositionalEmbedding(Embedding):
    """Learned positions; BART's table starts ``offset`` rows in (fairseq kept two for padding)."""

    offset = 2

    def __init__(self, num_positions: int, dim: int, padding_idx: int | None = None) -> None:
        super().__init__(num_positions + self.offset, dim)

    def forward(self, op, positions):
        """``positions`` int64 (any shape) → their rows."""
        if self.offset:
            positions = op.Add(positions, op.Constant(value_int=self.offset))
        return super().forward(op, positions)


class PositionsFromRowZero(BartLearnedPositionalEmbedding):
    """A position table read from row 0, without fairseq's offset: the learned tables of
    Blenderbot and LED, the fixed sinusoids of Pegasus, Marian and M2M-100 (which
    ``sanitize`` computes when the checkpoint lacks them)."""

    offset = 0


def _length(op, x, axis: int):
    """The size of ``x``'s ``axis`` as a scalar int64."""
    return op.Squeeze(op.Shape(x, start=axis, end=axis + 1), [0])


class BartEncoder(nn.Module):
    """Token and position embeddings, then the layers; variants set the class attributes."""

    layer_class = BartEncoderLayer
    positions_class = BartLearnedPositionalEmbedding
    embedding_norm = True  # ``layernorm_embedding`` after the embeddings
    final_norm = False  # ``layer_norm`` after the last layer (pre-norm stacks)

    def __init__(self, config: BartConfig, num_layers: int | None = None) -> None:
        super().__init__()
        d = config.hidden_size
        self.embed_tokens = Embedding(config.vocab_size, d)
        self.embed_positions = self.positions_class(
            config.max_position_embeddings, d, config.pad_token_id
        )
        count = config.encoder_layers if num_layers is None else num_layers
        self.layers = nn.ModuleList([self.layer_class(config) for _ in range(count)])
        self.layernorm_embedding = LayerNorm(d, 1e-5) if self.embedding_norm else None
        self.layer_norm = LayerNorm(d, 1e-5) if self.final_norm else None
        self.embed_scale = math.sqrt(d) if config.scale_embedding else 1.0

    def position_ids(self, op, input_ids, past_length):
        """``[seq]``: ``past_length, past_length + 1...`` (the same for every row)."""
        seq = _length(op, input_ids, 1)
        return op.Range(past_length, op.Add(past_length, seq), op.Constant(value_int=1))

    def embed(self, op, input_ids, past_length):
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        if self.embed_scale != 1.0:
            x = op.Mul(x, op.CastLike(op.Constant(value_float=self.embed_scale), x))
        x = op.Add(x, self.embed_positions(op, self.position_ids(op, input_ids, past_length)))
        return x if self.layernorm_embedding is None else self.layernorm_embedding(op, x)

    def finish(self, op, x):
        return x if self.layer_norm is None else self.layer_norm(op, x)

    def forward(self, op, input_ids, attention_mask):
        x = self.embed(op, input_ids, op.Constant(value_int=0))
        bias = padding_bias(op, attention_mask, x.dtype)  # [batch, 1, source, source]
        for layer in self.layers:
            x = layer(op, x, bias)
        return self.finish(op, x)


class BartDecoder(BartEncoder):
    layer_class = BartDecoderLayer

    def __init__(self, config: BartConfig) -> None:
        super().__init__(config, config.decoder_layers)

    def forward(self, op, input_ids, encoder_mask, self_cache, cross_cache):
        x = self.embed(op, input_ids, _length(op, self_cache[0][0], 2))
        causal = causal_bias(op, input_ids, self_cache[0][0], x.dtype)  # [batch, 1, target, total]
        cross_bias = padding_bias(op, encoder_mask, x.dtype, queries=input_ids)
        presents = []
        for layer, past, (key, value) in zip(self.layers, self_cache, cross_cache, strict=True):
            x, present = layer(op, x, causal, (cross_bias, key, value), past)
            presents.append(present)
        return self.finish(op, x), presents


class BartModel(nn.Module):
    encoder_class = BartEncoder
    decoder_class = BartDecoder

    def __init__(self, config: BartConfig) -> None:
        super().__init__()
        self.encoder = self.encoder_class(config)
        self.decoder = self.decoder_class(config)


class BartForConditionalGeneration(Model):
    """``model`` (encoder, decoder), the head tied to the decoder's embeddings, ``final_logits_bias``."""

    config_class = BartConfig
    task = "seq2seq"
    model_class = BartModel
    logits_bias = True  # ``final_logits_bias`` (a buffer, zero unless fine-tuned)

    def __init__(self, config: BartConfig) -> None:
        super().__init__()
        self.config = config
        self.model = self.model_class(config)
        embeddings = self.model.decoder.embed_tokens
        tied = config.tie_word_embeddings
        self.lm_head = (
            TiedLMHead(embeddings) if tied else Linear(config.hidden_size, config.vocab_size)
        )
        self.final_logits_bias = nn.Parameter([1, config.vocab_size]) if self.logits_bias else None

    def cache_shapes(self) -> tuple[int, int, int]:
        config = self.config
        return (
            config.decoder_layers,
            config.decoder_heads,
            config.hidden_size // config.decoder_heads,
        )

    def encode(self, op, input_ids, attention_mask):
        decoder = self.model.decoder
        with module_scope(op, self.model):
            hidden = self.model.encoder(op, input_ids, attention_mask)
            cross = []
            for layer in decoder.layers:  # computed once here, read at every decoder step
                with module_scope(op, decoder, layer, layer.encoder_attn):
                    cross.append(layer.encoder_attn.project_kv(op, hidden))
        return hidden, cross

    def decode(self, op, input_ids, encoder_mask, self_cache, cross_cache):
        with module_scope(op, self):
            with module_scope(op, self.model):
                hidden, presents = self.model.decoder(
                    op, input_ids, encoder_mask, self_cache, cross_cache
                )
            logits = self.lm_head(op, hidden)
            if self.final_logits_bias is not None:
                logits = op.Add(logits, self.final_logits_bias)
        return logits, presents

    def sanitize(self, weights: dict) -> dict:
        """The stacks' embeddings default to ``model.shared``; a tied head reads the decoder's."""
        shared = weights.pop("model.shared.weight", None)
        if shared is not None:
            weights.setdefault("model.encoder.embed_tokens.weight", shared)
            weights.setdefault("model.decoder.embed_tokens.weight", shared)
        if self.config.tie_word_embeddings:
            weights.pop("lm_head.weight", None)
        return weights


class BartDecoderWrapper(nn.Module):
    """``model.decoder``: where ``*ForCausalLM`` checkpoints keep the decoder."""

    def __init__(self, decoder: BartDecoder) -> None:
        super().__init__()
        self.decoder = decoder


class BartForCausalLM(Model):
    """The decoder of :attr:`seq2seq_class` alone, as transformers' ``BartForCausalLM``: no
    encoder states, so no cross-attention (the checkpoint's ``encoder_attn`` is unread), no
    ``final_logits_bias``. Positions count the tokens before these (transformers: the
    cache's length; it takes no ``position_ids``)."""

    config_class = BartConfig
    seq2seq_class = BartForConditionalGeneration  # a variant names its own: its decoder
    ignored = (
        "model.decoder.layers.*.encoder_attn.*",
        "model.decoder.layers.*.encoder_attn_layer_norm.*",
    )
    #: whether transformers ties the head to the embeddings when the config says so
    ties_head: ClassVar[bool] = True

    def __init__(self, config: BartConfig) -> None:
        super().__init__()
        self.config = config
        decoder = self.seq2seq_class.model_class.decoder_class(config)
        for layer in decoder.layers:
            layer.encoder_attn = layer.encoder_attn_layer_norm = None
        self.model = BartDecoderWrapper(decoder)
        self.tied = self.ties_head and config.tie_word_embeddings
        self.lm_head = (
            TiedLMHead(decoder.embed_tokens)
            if self.tied
            else Linear(config.hidden_size, config.vocab_size)
        )

    def kv_cache_shapes(self) -> list[tuple[int, int, int]]:
        layers, heads, head_dim = BartForConditionalGeneration.cache_shapes(self)
        return [(heads, head_dim, head_dim)] * layers

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        decoder = self.model.decoder
        with module_scope(op, self.model, decoder):
            # the tokens before these, on the mask: shared buffers (ORT GenAI's) hold the
            # cache at its full length
            seq = _length(op, input_ids, 1)
            x = decoder.embed(op, input_ids, op.Sub(_length(op, attention_mask, 1), seq))
            bias = attention_bias(op, attention_mask, seq, x.dtype)
            presents = []
            for layer, past in zip(decoder.layers, past_key_values, strict=True):
                x, present = layer(op, x, bias, None, past)
                presents.append(present)
            x = decoder.finish(op, x)
        return self.lm_head(op, x), presents

    def sanitize(self, weights: dict) -> dict:
        """A tied head reads the decoder's embeddings."""
        if self.tied:
            weights.pop("lm_head.weight", None)
        return weights


# PLBART is BART's architecture under its own config class.
MODEL_TYPES = {
    "bart": BartForConditionalGeneration,
    "plbart": BartForConditionalGeneration,
    "BartForCausalLM": BartForCausalLM,
    "PLBartForCausalLM": BartForCausalLM,
}
