"""LongT5: T5 whose encoder attends locally in blocks, optionally with transient global tokens.

The encoder splits the (zero-padded) source into blocks of ``local_radius + 1``
tokens; each block's queries attend to the keys of itself and its two
neighbours, masked to ``|i - j| <= local_radius`` and to real tokens, with T5's
bucketed bias of ``j - i`` (a constant ``[block, 3 * block]`` pattern). Each
block is one batch row of the ONNX ``Attention`` op, so memory grows linearly
with the source.

``transient-global`` adds, in every layer, one global token per full
``global_block_size`` block of the source: the sum of the layer's normed states
of its real tokens (a trailing partial block joins the last full one), passed
through ``global_input_layer_norm`` and the layer's own ``k``/``v``. Every block
also attends to them, with a second bucketed table of ``g - block_of(i)``;
globals past the last real block are masked. Block ids are exact integers
(transformers computes them through a float cumsum, which agrees for the
power-of-two block sizes of the published checkpoints).

Block 0 computes the whole bias (positions and masks) and later blocks reuse
it, as transformers does. The decoder is plain T5.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    Linear,
    RMSNorm,
    bidirectional_attention,
    lowest_value,
)
from mobius.errors import ConfigError
from mobius_text.models.t5 import (
    T5Config,
    T5ForConditionalGeneration,
    T5LayerFF,
    T5Stack,
    relative_buckets,
)

INT64 = ir.DataType.INT64


@dataclass
class LongT5Config(T5Config):
    encoder_attention_type: str = "local"
    local_radius: int = 127
    global_block_size: int = 16

    @classmethod
    def from_hf(cls, hf: Any) -> LongT5Config:
        kind = hf.encoder_attention_type
        if kind not in ("local", "transient-global"):
            raise ConfigError(
                f"encoder_attention_type {kind!r} is not built; 'local' or 'transient-global'"
            )
        return dataclasses.replace(
            super().from_hf(hf),
            encoder_attention_type=kind,
            local_radius=hf.local_radius,
            global_block_size=hf.global_block_size,
        )


def split_blocks(op, x, ctx: EncoderContext):
    """``[batch, seq, ...]`` → ``[batch, blocks, block_len, ...]``, zero-padded at the end.

    Shapes are spelled out (``allowzero``): a source with no global tokens has a 0 axis.
    """
    x = op.Pad(x, op.Concat([0], ctx.pad, axis=0), None, [1])
    shape = [op.Shape(x, start=0, end=1), ctx.blocks, [ctx.block_len], op.Shape(x, start=2)]
    return op.Reshape(x, op.Concat(*shape, axis=0), allowzero=1)


def three_blocks(op, x):
    """``[batch, blocks, n, ...]`` → ``[batch, blocks, 3 * n, ...]``: each block and its neighbours."""
    x = op.Pad(x, [1, 1], None, [1])  # a zero block at each end
    ends = ((0, -2), (1, -1), (2, np.iinfo(np.int64).max))
    return op.Concat(*(op.Slice(x, [start], [end], [1]) for start, end in ends), axis=2)


def merge_blocks(op, x):
    """``[batch, blocks, ...]`` → ``[batch * blocks, ...]``."""
    return op.Reshape(x, op.Concat([-1], op.Shape(x, start=2), axis=0))


def bucket_bias(op, table: Embedding, relative, bidirectional: bool, config: T5Config):
    """``table`` rows for T5's bucket of each int64 relative position: ``[..., heads]``."""
    buckets = relative_buckets(bidirectional, config.num_buckets, config.max_distance)
    d = config.max_distance
    low, high = op.Constant(value_int=-d), op.Constant(value_int=d)
    index = op.Add(op.Clip(relative, low, high), high)
    return table(op, op.Gather(op.Constant(value=ir.tensor(buckets)), index, axis=0))


def _masked(op, visible, bias, like):
    """``bias`` where ``visible``, else the lowest value (finite: fully masked pad rows stay finite)."""
    lowest = op.CastLike(op.Constant(value_float=lowest_value(like.dtype)), like)
    return op.Where(visible, op.CastLike(bias, like), lowest)


class EncoderContext:
    """What every encoder layer reads: the block layout and, for transient-global, the block ids."""

    def __init__(self, op, attention_mask, config: LongT5Config) -> None:
        self.mask, self.block_len = attention_mask, config.local_radius + 1
        n = self.block_len
        self.length = op.Shape(attention_mask, start=1, end=2)  # [1]
        self.pad = op.Mod(op.Sub(n, op.Mod(self.length, n)), n)  # to a multiple of n
        self.blocks = op.Div(op.Add(self.length, self.pad), n)
        if config.encoder_attention_type != "transient-global":
            return
        size = config.global_block_size
        length = op.Squeeze(self.length, [0])
        positions = op.Range(0, length, 1)
        real = op.Not(op.Equal(attention_mask, 0))  # [batch, seq]
        ends = op.And(real, op.Equal(op.Mod(positions, size), size - 1))
        full = op.ReduceSum(op.Cast(ends, to=INT64), [1], keepdims=1)  # full blocks [batch, 1]
        own = op.Min(op.Div(positions, size), op.Sub(full, 1))  # an orphan joins the last
        self.block_ids = op.Where(real, own, -1)  # [batch, seq]
        self.globals = op.Range(0, op.Div(length, size), 1)  # [G]
        last = op.ReduceMax(self.block_ids, [1], keepdims=1)  # [batch, 1]
        self.segments = op.Cast(op.LessOrEqual(self.globals, last), to=INT64)  # [batch, G]


class LongT5LocalAttention(nn.Module):
    """Blocked local self-attention (``LocalSelfAttention``); block 0 owns the bias table."""

    def __init__(self, config: LongT5Config, relative_bias: bool) -> None:
        super().__init__()
        inner = config.num_heads * config.head_dim
        self.q = Linear(config.hidden_size, inner)
        self.k = Linear(config.hidden_size, inner)
        self.v = Linear(config.hidden_size, inner)
        self.o = Linear(inner, config.hidden_size)
        self.relative_attention_bias = (
            Embedding(config.num_buckets, config.num_heads) if relative_bias else None
        )
        self.config = config

    def local_bias(self, op, ctx: EncoderContext, like):
        """``[batch, blocks, heads, block, 3 * block]``: the position bias plus the local mask."""
        n = ctx.block_len
        offsets = np.arange(3 * n)[None, :] - np.arange(n, 2 * n)[:, None]  # j - i, [n, 3n]
        relative = op.Constant(value=ir.tensor(offsets.astype(np.int64)))
        values = bucket_bias(op, self.relative_attention_bias, relative, True, self.config)
        position = op.Unsqueeze(op.Transpose(values, perm=[2, 0, 1]), [0, 1])  # [1,1,h,n,3n]
        blocked = op.Cast(split_blocks(op, ctx.mask, ctx), to=ir.DataType.BOOL)
        keys = three_blocks(op, blocked)  # [batch, blocks, 3n]
        near = op.Constant(value=ir.tensor(np.abs(offsets) < n))
        visible = op.And(op.And(op.Unsqueeze(blocked, [3]), op.Unsqueeze(keys, [2])), near)
        return _masked(op, op.Unsqueeze(visible, [2]), position, like)

    def keys_values(self, op, x, ctx: EncoderContext):
        """Each block's keys and values ``[batch, blocks, keys, inner]``."""
        key = three_blocks(op, split_blocks(op, self.k(op, x), ctx))
        value = three_blocks(op, split_blocks(op, self.v(op, x), ctx))
        return key, value

    def forward(self, op, x, ctx: EncoderContext, bias=None):
        """``x [batch, seq, hidden]`` → ``(y, bias)``; ``bias`` is made here when not given."""
        if bias is None:
            bias = self.local_bias(op, ctx, x)
        query = merge_blocks(op, split_blocks(op, self.q(op, x), ctx))  # [B', n, inner]
        key, value = (merge_blocks(op, t) for t in self.keys_values(op, x, ctx))
        y = bidirectional_attention(
            op, query, key, value, merge_blocks(op, bias), self.config.num_heads, 1.0
        )  # [batch * blocks, n, inner]
        y = op.Reshape(
            y, op.Concat(op.Shape(x, start=0, end=1), [-1], op.Shape(y, start=2), axis=0)
        )
        y = op.Slice(y, [0], ctx.length, [1])
        return self.o(op, y), bias


class LongT5TransientGlobalAttention(LongT5LocalAttention):
    """Local attention plus the keys and values of the layer's transient global tokens."""

    def __init__(self, config: LongT5Config, relative_bias: bool) -> None:
        super().__init__(config, relative_bias)
        self.global_relative_attention_bias = (
            Embedding(config.num_buckets, config.num_heads) if relative_bias else None
        )
        self.global_input_layer_norm = RMSNorm(config.hidden_size, config.eps)

    def local_bias(self, op, ctx: EncoderContext, like):
        """The local bias, then ``[..., G]`` more keys: the side bias of each token."""
        local = super().local_bias(op, ctx, like)
        relative = op.Sub(ctx.globals, op.Unsqueeze(ctx.block_ids, [2]))  # [batch, seq, G]
        side = bucket_bias(op, self.global_relative_attention_bias, relative, True, self.config)
        seen = op.Equal(op.Unsqueeze(ctx.mask, [2]), op.Unsqueeze(ctx.segments, [1]))
        side = _masked(op, op.Unsqueeze(seen, [3]), side, like)  # [batch, seq, G, heads]
        side = split_blocks(op, side, ctx)  # [b, blocks, n, G, h]
        return op.Concat(local, op.Transpose(side, perm=[0, 1, 4, 2, 3]), axis=-1)

    def keys_values(self, op, x, ctx: EncoderContext):
        key, value = super().keys_values(op, x, ctx)
        one_hot = op.Equal(op.Unsqueeze(ctx.block_ids, [2]), ctx.globals)  # [batch, seq, G]
        one_hot = op.CastLike(op.Transpose(one_hot, perm=[0, 2, 1]), x)
        tokens = self.global_input_layer_norm(op, op.MatMul(one_hot, x))  # [batch, G, hidden]
        blocks = op.Shape(key, start=1, end=2)
        shape = op.Concat([1], blocks, [1, 1], axis=0)

        def tiled(t):  # [batch, G, inner] -> [batch, blocks, G, inner]
            return op.Expand(op.Unsqueeze(t, [1]), shape)

        key = op.Concat(key, tiled(self.k(op, tokens)), axis=2)
        value = op.Concat(value, tiled(self.v(op, tokens)), axis=2)
        return key, value


class LongT5LayerLocalSelfAttention(nn.Module):
    attention_class = LongT5LocalAttention
    attribute = "LocalSelfAttention"

    def __init__(self, config: LongT5Config, relative_bias: bool) -> None:
        super().__init__()
        setattr(self, self.attribute, self.attention_class(config, relative_bias))
        self.layer_norm = RMSNorm(config.hidden_size, config.eps)

    def forward(self, op, x, ctx, bias):
        out, bias = getattr(self, self.attribute)(op, self.layer_norm(op, x), ctx, bias)
        return op.Add(x, out), bias


class LongT5LayerTransientGlobalSelfAttention(LongT5LayerLocalSelfAttention):
    attention_class = LongT5TransientGlobalAttention
    attribute = "TransientGlobalSelfAttention"


class LongT5EncoderBlock(nn.Module):
    def __init__(self, config: LongT5Config, relative_bias: bool) -> None:
        super().__init__()
        layer = (
            LongT5LayerTransientGlobalSelfAttention
            if config.encoder_attention_type == "transient-global"
            else LongT5LayerLocalSelfAttention
        )
        self.layer = nn.ModuleList([layer(config, relative_bias), T5LayerFF(config)])

    def forward(self, op, x, ctx, bias):
        x, bias = self.layer[0](op, x, ctx, bias)
        return self.layer[1](op, x), bias


class LongT5EncoderStack(nn.Module):
    def __init__(self, config: LongT5Config) -> None:
        super().__init__()
        self.block = nn.ModuleList(
            [LongT5EncoderBlock(config, i == 0) for i in range(config.num_layers)]
        )
        self.final_layer_norm = RMSNorm(config.hidden_size, config.eps)
        self.config = config

    def forward(self, op, x, attention_mask):
        ctx, bias = EncoderContext(op, attention_mask, self.config), None
        for block in self.block:
            x, bias = block(op, x, ctx, bias)
        return self.final_layer_norm(op, x)


class LongT5ForConditionalGeneration(T5ForConditionalGeneration):
    config_class = LongT5Config
    ignored = ()  # the cross-attention has no position table

    def __init__(self, config: LongT5Config) -> None:
        nn.Module.__init__(self)
        self.config = config
        self.shared = Embedding(config.vocab_size, config.hidden_size)
        self.encoder = LongT5EncoderStack(config)
        self.decoder = T5Stack(config, is_decoder=True)
        self.lm_head = Linear(config.hidden_size, config.vocab_size)

    def encode(self, op, input_ids, attention_mask):
        hidden = self.encoder(op, self.shared(op, input_ids), attention_mask)
        return hidden, self.cross_cache(op, hidden)


MODEL_TYPES = {"longt5": LongT5ForConditionalGeneration}
