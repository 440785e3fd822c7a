"""T5 (and mT5): pre-norm encoder–decoder with bucketed relative position biases and no score scaling.

The first block of each stack owns the ``relative_attention_bias`` table and
every block reuses its bias. Scores are ``q·k + bias`` (no ``1/sqrt(d)``).
Graphs follow :class:`mobius.tasks._seq2seq.Seq2SeqTask`.
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
    Linear,
    RMSNorm,
    Seq2SeqAttention,
    causal_bias,
    get_activation,
    module_scope,
    padding_bias,
)
from mobius.model import Model


@dataclass
class T5Config:
    model_type: str
    vocab_size: int
    hidden_size: int
    head_dim: int
    intermediate_size: int
    num_layers: int
    num_decoder_layers: int
    num_heads: int
    num_buckets: int = 32
    max_distance: int = 128
    eps: float = 1e-6
    act: str = "relu"
    gated: bool = False
    scale_decoder_outputs: bool = True
    decoder_start_token_id: int | None = 0
    eos_token_id: int | list[int] | None = 1
    pad_token_id: int | None = 0

    @classmethod
    def from_hf(cls, hf: Any) -> T5Config:
        return cls(
            model_type=hf.model_type,
            vocab_size=hf.vocab_size,
            hidden_size=hf.d_model,
            head_dim=hf.d_kv,
            intermediate_size=hf.d_ff,
            num_layers=hf.num_layers,
            num_decoder_layers=hf.num_decoder_layers or hf.num_layers,
            num_heads=hf.num_heads,
            num_buckets=hf.relative_attention_num_buckets,
            max_distance=hf.relative_attention_max_distance,
            eps=hf.layer_norm_epsilon,
            act=hf.dense_act_fn,
            gated=getattr(hf, "is_gated_act", False),  # Switch's experts are never gated
            scale_decoder_outputs=getattr(hf, "scale_decoder_outputs", False),  # mT5 never scales
            decoder_start_token_id=getattr(hf, "decoder_start_token_id", None),
            eos_token_id=hf.eos_token_id,
            pad_token_id=hf.pad_token_id,
        )


def relative_buckets(bidirectional: bool, num_buckets: int, max_distance: int) -> np.ndarray:
    """The bucket of each relative position ``-max_distance..max_distance`` (index + max_distance).

    The float32 arithmetic follows transformers' ``_relative_position_bucket`` step
    by step, so the truncation lands on the same bucket; beyond ``max_distance``
    every position shares the last bucket, so clipping to the table is exact.
    """
    relative = np.arange(-max_distance, max_distance + 1, dtype=np.int64)
    buckets = np.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative > 0) * num_buckets
        relative = np.abs(relative)
    else:
        relative = -np.minimum(relative, 0)
    max_exact = num_buckets // 2
    with np.errstate(divide="ignore", invalid="ignore"):  # log(0): a small bucket anyway
        scaled = np.log(relative.astype(np.float32) / np.float32(max_exact))
        scaled = scaled / np.float32(math.log(max_distance / max_exact))
        large = max_exact + (scaled * np.float32(num_buckets - max_exact)).astype(np.int64)
    large = np.minimum(large, num_buckets - 1)
    return buckets + np.where(relative < max_exact, relative, large)


class T5Attention(Seq2SeqAttention):
    """Unscaled scores, no biases; block 0 of each stack owns the relative position table."""

    projection_names = ("q", "k", "v", "o")

    def __init__(self, config: T5Config, relative_bias: bool = False) -> None:
        super().__init__(
            config.hidden_size, config.num_heads, config.head_dim, bias=False, scale=1.0
        )
        self.relative_attention_bias = (
            Embedding(config.num_buckets, config.num_heads) if relative_bias else None
        )
        self.num_buckets, self.max_distance = config.num_buckets, config.max_distance

    def position_bias(self, op, query_pos, key_pos, bidirectional: bool):
        """``[1, heads, queries, keys]`` from this layer's table; positions are 1-D int64."""
        table = relative_buckets(bidirectional, self.num_buckets, self.max_distance)
        relative = op.Sub(op.Unsqueeze(key_pos, [0]), op.Unsqueeze(query_pos, [1]))  # [q, k]
        d = self.max_distance
        low, high = op.Constant(value_int=-d), op.Constant(value_int=d)
        index = op.Add(op.Clip(relative, low, high), high)
        bucket = op.Gather(op.Constant(value=ir.tensor(table)), index, axis=0)  # [q, k]
        values = self.relative_attention_bias(op, bucket)  # [q, k, heads]
        return op.Unsqueeze(op.Transpose(values, perm=[2, 0, 1]), [0])


class T5CrossAttention(T5Attention, CrossAttention):
    """``EncDecAttention``: T5's projections over the keys and values the encoder graph cached."""


class T5LayerSelfAttention(nn.Module):
    def __init__(self, config: T5Config, relative_bias: bool) -> None:
        super().__init__()
        self.SelfAttention = T5Attention(config, relative_bias)
        self.layer_norm = RMSNorm(config.hidden_size, config.eps)

    def forward(self, op, x, bias, past_key=None, past_value=None):
        out = self.SelfAttention(op, self.layer_norm(op, x), bias, past_key, past_value)
        if past_key is None:
            return op.Add(x, out), None
        return op.Add(x, out[0]), out[1]


class T5LayerCrossAttention(nn.Module):
    def __init__(self, config: T5Config) -> None:
        super().__init__()
        self.EncDecAttention = T5CrossAttention(config)
        self.layer_norm = RMSNorm(config.hidden_size, config.eps)

    def forward(self, op, x, bias, key, value):
        return op.Add(x, self.EncDecAttention(op, self.layer_norm(op, x), bias, key, value))


class T5DenseReluDense(nn.Module):
    """``wo(act(wi(x)))``, or gated: ``wo(act(wi_0(x)) * wi_1(x))``."""

    def __init__(self, config: T5Config) -> None:
        super().__init__()
        d, ff = config.hidden_size, config.intermediate_size
        self.wi = None if config.gated else Linear(d, ff)
        self.wi_0 = Linear(d, ff) if config.gated else None
        self.wi_1 = Linear(d, ff) if config.gated else None
        self.wo = Linear(ff, d)
        self.act = get_activation(config.act)

    def forward(self, op, x):
        if self.wi is not None:
            return self.wo(op, self.act(op, self.wi(op, x)))
        return self.wo(op, op.Mul(self.act(op, self.wi_0(op, x)), self.wi_1(op, x)))


class T5LayerFF(nn.Module):
    def __init__(self, config: T5Config) -> None:
        super().__init__()
        self.DenseReluDense = T5DenseReluDense(config)
        self.layer_norm = RMSNorm(config.hidden_size, config.eps)

    def forward(self, op, x):
        return op.Add(x, self.DenseReluDense(op, self.layer_norm(op, x)))


class T5Block(nn.Module):
    def __init__(self, config: T5Config, is_decoder: bool, relative_bias: bool) -> None:
        super().__init__()
        layers = [T5LayerSelfAttention(config, relative_bias)]
        layers += [T5LayerCrossAttention(config)] if is_decoder else []
        self.layer = nn.ModuleList([*layers, T5LayerFF(config)])

    def forward(self, op, x, bias, cross=None, past=(None, None)):
        x, present = self.layer[0](op, x, bias, *past)
        if cross is not None:
            cross_bias, key, value = cross
            x = self.layer[1](op, x, cross_bias, key, value)
        return self.layer[-1](op, x), present


class T5Stack(nn.Module):
    """``encoder`` or ``decoder``: blocks and the final norm; embeddings come from ``shared``."""

    def __init__(self, config: T5Config, is_decoder: bool) -> None:
        super().__init__()
        count = config.num_decoder_layers if is_decoder else config.num_layers
        self.block = nn.ModuleList([self.make_block(config, is_decoder, i) for i in range(count)])
        self.final_layer_norm = RMSNorm(config.hidden_size, config.eps)
        self.is_decoder = is_decoder

    def make_block(self, config: T5Config, is_decoder: bool, index: int) -> T5Block:
        return T5Block(config, is_decoder, relative_bias=index == 0)

    def layer_bias(self, op, index: int, query_pos, key_pos, shared):
        """The position bias of block ``index``: T5 computes it in block 0 and shares it."""
        if index > 0:
            return shared
        return self.own_bias(op, index, query_pos, key_pos)

    def own_bias(self, op, index: int, query_pos, key_pos):
        """Block ``index``'s bias from its own table (named as the checkpoint names it)."""
        block = self.block[index]
        attention = block.layer[0].SelfAttention
        with module_scope(op, block, block.layer[0], attention):  # its checkpoint name
            return attention.position_bias(op, query_pos, key_pos, not self.is_decoder)

    def forward(self, op, x, mask_bias, query_pos, key_pos, cross=None, past=None):
        bias, presents = None, []
        for i, block in enumerate(self.block):
            bias = self.layer_bias(op, i, query_pos, key_pos, bias)
            cross_i = None if cross is None else (cross[0], *cross[1][i])
            x, present = block(
                op, x, op.Add(bias, mask_bias), cross_i, past[i] if past else (None, None)
            )
            presents.append(present)
        return self.final_layer_norm(op, x), presents


def _positions(op, length):
    """``0..length-1`` as int64 ``[length]``; ``length`` a scalar int64 value."""
    return op.Range(op.Constant(value_int=0), length, op.Constant(value_int=1))


def _length(op, x, axis: int):
    return op.Squeeze(op.Shape(x, start=axis, end=axis + 1), [0])


class T5ForConditionalGeneration(Model):
    """The seq2seq model: ``shared`` embeddings, ``encoder``, ``decoder`` and ``lm_head``."""

    config_class = T5Config
    task = "seq2seq"
    stack_class = T5Stack

    def __init__(self, config: T5Config) -> None:
        super().__init__()
        self.config = config
        self.shared = Embedding(config.vocab_size, config.hidden_size)
        self.encoder = self.stack_class(config, is_decoder=False)
        self.decoder = self.stack_class(config, is_decoder=True)
        self.lm_head = Linear(config.hidden_size, config.vocab_size)

    def cache_shapes(self) -> tuple[int, int, int]:
        return self.config.num_decoder_layers, self.config.num_heads, self.config.head_dim

    def encode(self, op, input_ids, attention_mask):
        x = self.shared(op, input_ids)  # [batch, source, hidden]
        positions = _positions(op, _length(op, input_ids, 1))
        mask = padding_bias(op, attention_mask, x.dtype)  # [batch, 1, source, source]
        hidden, _ = self.encoder(op, x, mask, positions, positions)
        return hidden, self.cross_cache(op, hidden)

    def cross_cache(self, op, hidden):
        """Each decoder block's cross-attention ``(key, value)``: made once, read at every step."""
        cross = []
        for block in self.decoder.block:
            layer = block.layer[1]
            with module_scope(op, self.decoder, block, layer, layer.EncDecAttention):
                cross.append(layer.EncDecAttention.project_kv(op, hidden))
        return cross

    def decode(self, op, input_ids, encoder_mask, self_cache, cross_cache):
        x = self.shared(op, input_ids)  # [batch, target, hidden]
        past = _length(op, self_cache[0][0], 2)
        total = op.Add(past, _length(op, input_ids, 1))
        query_pos = op.Range(past, total, op.Constant(value_int=1))
        causal = causal_bias(op, input_ids, self_cache[0][0], x.dtype)  # [batch, 1, target, total]
        cross_bias = padding_bias(op, encoder_mask, x.dtype, queries=input_ids)
        hidden, presents = self.decoder(
            op, x, causal, query_pos, _positions(op, total), (cross_bias, cross_cache), self_cache
        )
        if self.config.scale_decoder_outputs:  # original T5 ties the head and rescales
            hidden = op.Mul(
                hidden, op.CastLike(op.Constant(value_float=self.config.hidden_size**-0.5), hidden)
            )
        return self.lm_head(op, hidden), presents

    ignored = ("decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight",)

    def sanitize(self, weights: dict) -> dict:
        """The stacks' embeddings are ``shared``; a tied head (no ``lm_head.weight``) is too."""
        weights.pop("encoder.embed_tokens.weight", None)
        weights.pop("decoder.embed_tokens.weight", None)
        weights.setdefault("lm_head.weight", weights["shared.weight"])
        return weights


class UMT5Stack(T5Stack):
    """UMT5: every block has its own relative position table."""

    def make_block(self, config: T5Config, is_decoder: bool, index: int) -> T5Block:
        return T5Block(config, is_decoder, relative_bias=True)

    def layer_bias(self, op, index: int, query_pos, key_pos, shared):
        return self.own_bias(op, index, query_pos, key_pos)


class UMT5ForConditionalGeneration(T5ForConditionalGeneration):
    stack_class = UMT5Stack


MODEL_TYPES = {
    "t5": T5ForConditionalGeneration,
    "mt5": T5ForConditionalGeneration,
    "umt5": UMT5ForConditionalGeneration,
}
