"""ProphetNet: a post-norm encoder–decoder whose decoder runs a main stream and ``ngram`` predict streams.

The encoder is BERT-like (learned positions from ``pad_token_id + 1``, an embedding
LayerNorm, post-norm layers). The decoder carries ``1 + ngram`` streams through
every layer, laid out stream-major ``[batch, (1 + ngram) * seq, hidden]``: the main
stream (token + position embeddings) and, per predict stream ``n``, a row of
``ngram_embeddings`` plus the position embedding one step ahead. Per-token blocks
(the norms, cross-attention, feed-forward) treat the streams alike; the ngram
self-attention differs:

- the main stream attends causally to the main stream, plus a bucketed relative
  bias projected from each query (``relative_pos_embeddings``); its keys and values
  are the only cache;
- predict stream ``n`` at position ``t`` attends to the main keys ``j <= t - n``
  (key 0 always) and to its own key at ``t``, with the same kind of bias.

What generation needs, read off transformers' ``ProphetNetForConditionalGeneration``
and ``ProphetNetForCausalLM``: their ``logits`` are the LM head of predict stream 0
(not of the main stream), and the cache holds the main stream's keys and values
alone. Predict stream 0 reads the main stream; the main stream reads no predict
stream. Streams 1.. would not be needed, but transformers' multi-token forward
(prefill) reads the predict streams' relative-bias rows in a shuffled order: it
flattens them ``(position, stream, head)`` and reads them back as ``(stream,
head, position)``, so stream 0's bias at one position comes from another position,
or another stream (at one token a step the order is the identity). The graph
reproduces that order (the parity proves it), so it builds every predict stream:
the decoder processes ``(1 + ngram)`` rows per token. Likewise, as transformers,
the decoder alone (:class:`ProphetNetForCausalLM`) reads its ``attention_mask``
only at the first step (no cache yet), and positions count the tokens before these
(pads included). Relative distances count token indices: transformers' cached steps
agree with its prefill only at ``pad_token_id`` 0 (its checkpoints'; it checks).
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
    Linear,
    Seq2SeqAttention,
    TiedLMHead,
    get_activation,
    lowest_value,
    module_scope,
    padding_bias,
)
from mobius.model import Model


@dataclass
class ProphetNetConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    encoder_layers: int
    decoder_layers: int
    encoder_heads: int
    decoder_heads: int
    encoder_ffn_dim: int
    decoder_ffn_dim: int
    max_position_embeddings: int
    ngram: int = 2
    num_buckets: int = 32
    relative_max_distance: int = 128
    act: str = "gelu"
    tie_word_embeddings: bool = True
    pad_token_id: int | None = 0
    decoder_start_token_id: int | None = 0
    eos_token_id: int | list[int] | None = 2

    @classmethod
    def from_hf(cls, hf: Any) -> ProphetNetConfig:
        return cls(
            model_type=hf.model_type,
            vocab_size=hf.vocab_size,
            hidden_size=hf.hidden_size,
            encoder_layers=hf.num_encoder_layers,
            decoder_layers=hf.num_decoder_layers,
            encoder_heads=hf.num_encoder_attention_heads,
            decoder_heads=hf.num_decoder_attention_heads,
            encoder_ffn_dim=hf.encoder_ffn_dim,
            decoder_ffn_dim=hf.decoder_ffn_dim,
            max_position_embeddings=hf.max_position_embeddings,
            ngram=hf.ngram,
            num_buckets=hf.num_buckets,
            relative_max_distance=hf.relative_max_distance,
            act=hf.activation_function,
            tie_word_embeddings=bool(getattr(hf, "tie_word_embeddings", True)),
            pad_token_id=hf.pad_token_id,
            decoder_start_token_id=getattr(hf, "decoder_start_token_id", None),
            eos_token_id=hf.eos_token_id,
        )


def relative_bucket_table(num_buckets: int, max_distance: int) -> np.ndarray:
    """The bucket of each distance ``0..max_distance`` a key lies behind its query (int64).

    transformers' ``compute_relative_buckets`` (one-directional) in its float32 order:
    the log scale, then ``+ max_exact``, the cap, the truncation. From
    ``max_distance`` on every distance shares the last bucket, so clipping is exact.
    """
    distance = np.arange(max_distance + 1, dtype=np.int64)
    max_exact = num_buckets // 2
    with np.errstate(divide="ignore"):  # log(0): a small bucket anyway
        scaled = np.log(distance.astype(np.float32) / np.float32(max_exact))
    scaled = scaled / np.float32(math.log(max_distance / max_exact))
    large = np.float32(max_exact) + scaled * np.float32(num_buckets - max_exact)
    large = np.minimum(large, np.float32(num_buckets - 1))
    small = distance < max_exact
    return np.where(small, distance, np.where(small, 0, large).astype(np.int64))


def _length(op, x, axis: int):
    """The size of ``x``'s ``axis`` as a scalar int64."""
    return op.Squeeze(op.Shape(x, start=axis, end=axis + 1), [0])


def _float(op, value: float, dtype: ir.DataType):
    return op.Constant(value=ir.tensor(np.array(value, dtype=dtype.numpy())))


class ProphetNetAttention(Seq2SeqAttention):
    """The encoder's self-attention: ``query_proj``, ``key_proj``, ``value_proj``, ``out_proj``."""

    projection_names = ("query_proj", "key_proj", "value_proj", "out_proj")


class ProphetNetCrossAttention(ProphetNetAttention, CrossAttention):
    """``cross_attn``: decoder queries (every stream) over the cached encoder keys and values."""


class ProphetNetFeedForward(nn.Module):
    def __init__(self, hidden: int, ffn_dim: int, act: str) -> None:
        super().__init__()
        self.intermediate = Linear(hidden, ffn_dim, bias=True)
        self.output = Linear(ffn_dim, hidden, bias=True)
        self.act = get_activation(act)

    def forward(self, op, x):
        return self.output(op, self.act(op, self.intermediate(op, x)))


class ProphetNetEncoderLayer(nn.Module):
    """Post-norm: attention, add, norm; feed-forward, add, norm."""

    def __init__(self, config: ProphetNetConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.self_attn = ProphetNetAttention(d, config.encoder_heads)
        self.self_attn_layer_norm = LayerNorm(d, 1e-5)
        self.feed_forward = ProphetNetFeedForward(d, config.encoder_ffn_dim, config.act)
        self.feed_forward_layer_norm = LayerNorm(d, 1e-5)

    def forward(self, op, x, bias):
        x = self.self_attn_layer_norm(op, op.Add(self.self_attn(op, x, bias), x))
        return self.feed_forward_layer_norm(op, op.Add(self.feed_forward(op, x), x))


@dataclass
class StreamLayout:
    """What every decoder layer's ngram self-attention shares for one call.

    Buckets are int64: ``main_buckets [seq, total]``, ``predict_buckets [seq, total +
    seq]`` (the main keys, then the stream's own keys). Biases are additive:
    ``main_bias [batch|1, 1, seq, total]``, ``predict_bias [batch|1, ngram, 1, seq,
    total + seq]``.
    """

    main_buckets: ir.Value
    predict_buckets: ir.Value
    main_bias: ir.Value
    predict_bias: ir.Value


class ProphetNetNgramSelfAttention(nn.Module):
    """The main stream over its cache; each predict stream over the main keys and itself."""

    def __init__(self, config: ProphetNetConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.key_proj = Linear(d, d, bias=True)
        self.value_proj = Linear(d, d, bias=True)
        self.query_proj = Linear(d, d, bias=True)
        self.out_proj = Linear(d, d, bias=True)
        self.relative_pos_embeddings = Linear(d, config.num_buckets * config.decoder_heads, True)
        self.ngram, self.hidden = config.ngram, d
        self.heads, self.head_dim = config.decoder_heads, d // config.decoder_heads
        self.num_buckets = config.num_buckets

    def _heads(self, op, x):
        """``[batch, streams*seq, hidden]`` → ``[batch, streams, heads, seq, head_dim]``."""
        x = op.Reshape(
            x, op.Constant(value_ints=[0, 1 + self.ngram, -1, self.heads, self.head_dim])
        )
        return op.Transpose(x, perm=[0, 1, 3, 2, 4])

    def _attend(self, op, scores, bias, values):
        """softmax(scores + bias) @ values; transformers adds the relative bias, then the mask."""
        return op.MatMul(op.Softmax(op.Add(scores, bias), axis=-1), values)

    def forward(self, op, x, layout: StreamLayout, past_key, past_value):
        heads, nb = self.heads, self.num_buckets
        scale = _float(op, self.head_dim**0.5, x.dtype)
        q = self._heads(op, op.Div(self.query_proj(op, x), scale))  # [b, s, h, seq, dh]
        k, v = self._heads(op, self.key_proj(op, x)), self._heads(op, self.value_proj(op, x))
        main = op.Constant(value_int=0)
        starts, ends = op.Constant(value_ints=[1]), op.Constant(value_ints=[1 + self.ngram])

        def predict(t):  # the predict streams of [batch, streams, ...]
            return op.Slice(t, starts, ends, op.Constant(value_ints=[1]))

        key = op.Concat(past_key, op.Gather(k, main, axis=1), axis=2)  # [b, h, total, dh]
        value = op.Concat(past_value, op.Gather(v, main, axis=1), axis=2)
        streams = op.Reshape(x, op.Constant(value_ints=[0, 1 + self.ngram, -1, self.hidden]))

        # main stream: [b, h, seq, total]
        scores = op.MatMul(op.Gather(q, main, axis=1), op.Transpose(key, perm=[0, 1, 3, 2]))
        rel = self.relative_pos_embeddings(op, op.Gather(streams, main, axis=1))  # [b, seq, nb*h]
        rel = op.Reshape(rel, op.Constant(value_ints=[0, 0, nb, heads]))
        rel = op.Transpose(rel, perm=[0, 3, 1, 2])  # [b, h, seq, nb]
        index = op.Expand(layout.main_buckets, op.Shape(scores))
        scores = op.Add(scores, op.GatherElements(rel, index, axis=3))
        out = self._attend(op, scores, layout.main_bias, value)  # [b, h, seq, dh]
        out = op.Unsqueeze(op.Transpose(out, perm=[0, 2, 1, 3]), [1])  # [b, 1, seq, h, dh]

        # predict streams: [b, ngram, h, seq, total + seq]
        widen = op.Constant(value_ints=[1, self.ngram, 1, 1, 1])
        p_key = op.Concat(op.Expand(op.Unsqueeze(key, [1]), widen), predict(k), axis=3)
        p_value = op.Concat(op.Expand(op.Unsqueeze(value, [1]), widen), predict(v), axis=3)
        p_scores = op.MatMul(predict(q), op.Transpose(p_key, perm=[0, 1, 2, 4, 3]))
        rel = self.relative_pos_embeddings(op, predict(streams))  # [b, ngram, seq, nb*h]
        rel = op.Reshape(rel, op.Constant(value_ints=[0, 0, 0, nb, heads]))
        rel = op.Transpose(rel, perm=[0, 2, 1, 4, 3])  # [b, seq, ngram, h, nb]
        # transformers reads these rows back as [b, ngram, h, seq, nb] (module docstring)
        rel = op.Reshape(rel, op.Constant(value_ints=[0, self.ngram, heads, -1, nb]))
        index = op.Expand(layout.predict_buckets, op.Shape(p_scores))
        p_scores = op.Add(p_scores, op.GatherElements(rel, index, axis=4))
        p_out = self._attend(op, p_scores, layout.predict_bias, p_value)  # [b, ngram, h, seq, dh]
        p_out = op.Transpose(p_out, perm=[0, 1, 3, 2, 4])  # [b, ngram, seq, h, dh]

        out = op.Reshape(
            op.Concat(out, p_out, axis=1), op.Constant(value_ints=[0, -1, self.hidden])
        )  # [b, streams*seq, hidden]
        return self.out_proj(op, out), (key, value)


class ProphetNetDecoderLayer(nn.Module):
    """Post-norm: ngram self-attention, cross-attention (with an encoder), feed-forward."""

    def __init__(self, config: ProphetNetConfig, cross_attention: bool = True) -> None:
        super().__init__()
        d = config.hidden_size
        self.self_attn = ProphetNetNgramSelfAttention(config)
        self.self_attn_layer_norm = LayerNorm(d, 1e-5)
        if cross_attention:
            self.cross_attn = ProphetNetCrossAttention(d, config.decoder_heads)
            self.cross_attn_layer_norm = LayerNorm(d, 1e-5)
        else:
            self.cross_attn = self.cross_attn_layer_norm = None
        self.feed_forward = ProphetNetFeedForward(d, config.decoder_ffn_dim, config.act)
        self.feed_forward_layer_norm = LayerNorm(d, 1e-5)

    def forward(self, op, x, layout: StreamLayout, cross, past):
        """``cross`` is ``(bias, key, value)``, or ``None`` for the decoder alone."""
        h, present = self.self_attn(op, x, layout, *past)
        x = self.self_attn_layer_norm(op, op.Add(x, h))
        if cross is not None:
            bias, key, value = cross
            x = self.cross_attn_layer_norm(op, op.Add(self.cross_attn(op, x, bias, key, value), x))
        return self.feed_forward_layer_norm(op, op.Add(self.feed_forward(op, x), x)), present


class ProphetNetEncoder(nn.Module):
    """Token and position embeddings (positions from ``pad_token_id + 1``), a LayerNorm, the layers."""

    def __init__(self, config: ProphetNetConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.word_embeddings = Embedding(config.vocab_size, d)
        self.position_embeddings = Embedding(config.max_position_embeddings, d)
        self.embeddings_layer_norm = LayerNorm(d, 1e-5)
        self.layers = nn.ModuleList(
            [ProphetNetEncoderLayer(config) for _ in range(config.encoder_layers)]
        )
        self.first_position = (config.pad_token_id or 0) + 1

    def forward(self, op, input_ids, attention_mask):
        seq = _length(op, input_ids, 1)
        start = op.Constant(value_int=self.first_position)
        positions = op.Range(start, op.Add(start, seq), op.Constant(value_int=1))
        x = op.Add(self.word_embeddings(op, input_ids), self.position_embeddings(op, positions))
        x = self.embeddings_layer_norm(op, x)
        bias = padding_bias(op, attention_mask, x.dtype)  # [batch, 1, source, source]
        for layer in self.layers:
            x = layer(op, x, bias)
        return x


class ProphetNetDecoder(nn.Module):
    """The streams' embeddings, the layers; returns predict stream 0's states and the caches."""

    def __init__(self, config: ProphetNetConfig, cross_attention: bool = True) -> None:
        super().__init__()
        d = config.hidden_size
        self.word_embeddings = Embedding(config.vocab_size, d)
        self.position_embeddings = Embedding(config.max_position_embeddings, d)
        self.ngram_embeddings = Embedding(config.ngram, d)
        self.layers = nn.ModuleList(
            [ProphetNetDecoderLayer(config, cross_attention) for _ in range(config.decoder_layers)]
        )
        self.embeddings_layer_norm = LayerNorm(d, 1e-5)
        self.ngram, self.hidden = config.ngram, d
        self.first_position = (config.pad_token_id or 0) + 1
        self.table = relative_bucket_table(config.num_buckets, config.relative_max_distance)

    def _buckets(self, op, behind):
        """Buckets of int64 distances ``query - key`` (negative: the key is ahead)."""
        limit = op.Constant(value_int=len(self.table) - 1)
        index = op.Clip(behind, op.Constant(value_int=0), limit)
        return op.Gather(op.Constant(value=ir.tensor(self.table)), index, axis=0)

    def layout(self, op, queries, past_length, total, attention_mask, dtype) -> StreamLayout:
        """Buckets and masks for queries at ``queries [seq]`` over ``total`` main keys.

        ``attention_mask [batch, total]`` (the decoder alone) masks padded keys, as
        transformers, only when there is no cache yet.
        """
        keys = op.Range(op.Constant(value_int=0), total, op.Constant(value_int=1))
        query_col, key_row = op.Unsqueeze(queries, [1]), op.Unsqueeze(keys, [0])
        behind = op.Sub(query_col, key_row)  # [seq, total]
        own = op.Sub(query_col, op.Unsqueeze(queries, [0]))  # [seq, seq]
        one = op.Constant(value_int=1)
        main_buckets = self._buckets(op, behind)
        # a predict stream sits one step ahead of the main keys; its own key is bucket 0
        predict_buckets = op.Concat(
            self._buckets(op, op.Add(behind, one)), self._buckets(op, op.Sub(own, one)), axis=1
        )
        zero, lowest = _float(op, 0.0, dtype), _float(op, lowest_value(dtype), dtype)
        main_bias = op.Where(op.Less(behind, op.Constant(value_int=0)), lowest, zero)
        # stream n sees main key j when j <= query - n, and key 0 always
        reach = op.Constant(
            value=ir.tensor(np.arange(self.ngram, dtype=np.int64).reshape(-1, 1, 1))
        )
        hidden_key = op.And(
            op.Less(behind, reach), op.Not(op.Equal(key_row, op.Constant(value_int=0)))
        )
        predict_main = op.Where(hidden_key, lowest, zero)  # [ngram, seq, total]
        predict_own = op.Where(op.Equal(own, op.Constant(value_int=0)), zero, lowest)
        seq = op.Shape(queries)
        predict_own = op.Expand(
            predict_own, op.Concat(op.Constant(value_ints=[self.ngram]), seq, seq, axis=0)
        )
        predict_bias = op.Concat(predict_main, predict_own, axis=2)  # [ngram, seq, total + seq]
        main_bias = op.Unsqueeze(main_bias, [0, 1])  # [1, 1, seq, total]
        predict_bias = op.Unsqueeze(predict_bias, [0, 2])  # [1, ngram, 1, seq, total + seq]
        if attention_mask is not None:
            padding = op.Where(op.Cast(attention_mask, to=ir.DataType.BOOL), zero, lowest)
            first_step = op.Equal(past_length, op.Constant(value_int=0))
            padding = op.Where(first_step, padding, zero)  # [batch, total]
            main_bias = op.Add(main_bias, op.Unsqueeze(padding, [1, 2]))
            own_keys = op.Expand(zero, op.Concat(op.Shape(attention_mask, end=1), seq, axis=0))
            padding = op.Concat(padding, own_keys, axis=1)  # [batch, total + seq]
            predict_bias = op.Add(predict_bias, op.Unsqueeze(padding, [1, 2, 3]))
        return StreamLayout(main_buckets, predict_buckets, main_bias, predict_bias)

    def embed(self, op, input_ids, queries):
        """``[batch, (1 + ngram) * seq, hidden]``: the main stream, then each predict stream."""
        first = op.Constant(value_int=self.first_position)
        main = op.Add(
            self.word_embeddings(op, input_ids),
            self.position_embeddings(op, op.Add(queries, first)),
        )  # [batch, seq, hidden]
        ahead = self.position_embeddings(
            op, op.Add(queries, op.Add(first, op.Constant(value_int=1)))
        )
        # transformers gives stream n the row n - 1 (stream 0 the last)
        rows = [(n - 1) % self.ngram for n in range(self.ngram)]
        ngram = self.ngram_embeddings(op, op.Constant(value=ir.tensor(np.array(rows, np.int64))))
        predict = op.Add(op.Unsqueeze(ngram, [1]), op.Unsqueeze(ahead, [0]))  # [ngram, seq, hidden]
        batch = op.Concat(op.Shape(input_ids, end=1), op.Constant(value_ints=[1, 1, 1]), axis=0)
        predict = op.Expand(op.Unsqueeze(predict, [0]), batch)  # [batch, ngram, seq, hidden]
        streams = op.Concat(op.Unsqueeze(main, [1]), predict, axis=1)
        x = op.Reshape(streams, op.Constant(value_ints=[0, -1, self.hidden]))
        return self.embeddings_layer_norm(op, x)

    def forward(self, op, input_ids, past, attention_mask=None, encoder=None):
        """``past``: per layer the main stream's ``(key, value)``; ``encoder``: the source
        mask and per layer the cross ``(key, value)``, or ``None`` (the decoder alone).
        Returns predict stream 0 ``[batch, seq, hidden]`` and the main stream's caches."""
        seq = _length(op, input_ids, 1)
        past_length = _length(op, past[0][0], 2)
        total = op.Add(past_length, seq)
        queries = op.Range(past_length, total, op.Constant(value_int=1))  # [seq]
        x = self.embed(op, input_ids, queries)
        layout = self.layout(op, queries, past_length, total, attention_mask, x.dtype)
        cross = [None] * len(self.layers)
        if encoder is not None:
            encoder_mask, cross_cache = encoder
            # every stream queries the source: [batch, 1, streams*seq, source]
            bias = padding_bias(op, encoder_mask, x.dtype, queries=x)
            cross = [(bias, key, value) for key, value in cross_cache]
        presents = []
        for layer, layer_cross, layer_past in zip(self.layers, cross, past, strict=True):
            x, present = layer(op, x, layout, layer_cross, layer_past)
            presents.append(present)
        streams = op.Reshape(x, op.Constant(value_ints=[0, 1 + self.ngram, -1, self.hidden]))
        return op.Gather(streams, op.Constant(value_int=1), axis=1), presents


class ProphetNetModel(nn.Module):
    def __init__(self, config: ProphetNetConfig) -> None:
        super().__init__()
        self.encoder = ProphetNetEncoder(config)
        self.decoder = ProphetNetDecoder(config)


class ProphetNetForConditionalGeneration(Model):
    """``prophetnet`` (encoder, decoder) and ``lm_head`` (tied to the word embeddings by default)."""

    config_class = ProphetNetConfig
    task = "seq2seq"

    def __init__(self, config: ProphetNetConfig) -> None:
        super().__init__()
        self.config = config
        self.prophetnet = ProphetNetModel(config)
        embeddings = self.prophetnet.decoder.word_embeddings
        tied = config.tie_word_embeddings
        self.lm_head = (
            TiedLMHead(embeddings) if tied else Linear(config.hidden_size, config.vocab_size)
        )

    def cache_shapes(self) -> tuple[int, int, int]:
        c = self.config
        return c.decoder_layers, c.decoder_heads, c.hidden_size // c.decoder_heads

    def encode(self, op, input_ids, attention_mask):
        decoder = self.prophetnet.decoder
        with module_scope(op, self.prophetnet):
            hidden = self.prophetnet.encoder(op, input_ids, attention_mask)
            cross = []
            for layer in decoder.layers:  # computed once here, read at every decoder step
                with module_scope(op, decoder, layer, layer.cross_attn):
                    cross.append(layer.cross_attn.project_kv(op, hidden))
        return hidden, cross

    def decode(self, op, input_ids, encoder_mask, self_cache, cross_cache):
        with module_scope(op, self):
            with module_scope(op, self.prophetnet):
                hidden, presents = self.prophetnet.decoder(
                    op, input_ids, self_cache, encoder=(encoder_mask, cross_cache)
                )
            logits = self.lm_head(op, hidden)
        return logits, presents

    def sanitize(self, weights: dict) -> dict:
        """The stacks read ``prophetnet.word_embeddings`` unless they keep their own (untied)."""
        shared = weights.pop("prophetnet.word_embeddings.weight", None)
        if shared is not None:
            weights.setdefault("prophetnet.encoder.word_embeddings.weight", shared)
            weights.setdefault("prophetnet.decoder.word_embeddings.weight", shared)
        if self.config.tie_word_embeddings:
            weights.pop("lm_head.weight", None)
        return weights


class ProphetNetDecoderWrapper(nn.Module):
    """``prophetnet.decoder``: where ``ProphetNetForCausalLM`` checkpoints keep the decoder."""

    def __init__(self, decoder: ProphetNetDecoder) -> None:
        super().__init__()
        self.decoder = decoder


class ProphetNetForCausalLM(Model):
    """The decoder alone, as transformers' ``ProphetNetForCausalLM``: no encoder states, so no
    cross-attention (the checkpoint's ``cross_attn`` is unread); the logits of predict stream 0."""

    config_class = ProphetNetConfig
    ignored = (
        "prophetnet.decoder.layers.*.cross_attn.*",
        "prophetnet.decoder.layers.*.cross_attn_layer_norm.*",
    )

    def __init__(self, config: ProphetNetConfig) -> None:
        super().__init__()
        self.config = config
        decoder = ProphetNetDecoder(config, cross_attention=False)
        self.prophetnet = ProphetNetDecoderWrapper(decoder)
        self.lm_head = (
            TiedLMHead(decoder.word_embeddings)
            if config.tie_word_embeddings
            else Linear(config.hidden_size, config.vocab_size)
        )

    def kv_cache_shapes(self) -> list[tuple[int, int, int]]:
        c = self.config
        head_dim = c.hidden_size // c.decoder_heads
        return [(c.decoder_heads, head_dim, head_dim)] * c.decoder_layers

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        """``position_ids`` is unread: transformers counts positions from the cache's length."""
        with module_scope(op, self.prophetnet):
            hidden, presents = self.prophetnet.decoder(
                op, input_ids, past_key_values, attention_mask=attention_mask
            )
        return self.lm_head(op, hidden), presents

    def sanitize(self, weights: dict) -> dict:
        """The decoder reads ``prophetnet.word_embeddings`` unless it keeps its own (untied)."""
        shared = weights.pop("prophetnet.word_embeddings.weight", None)
        if shared is not None:
            weights.setdefault("prophetnet.decoder.word_embeddings.weight", shared)
        if self.config.tie_word_embeddings:
            weights.pop("lm_head.weight", None)
        return weights


MODEL_TYPES = {
    "prophetnet": ProphetNetForConditionalGeneration,
    "ProphetNetForCausalLM": ProphetNetForCausalLM,
}
