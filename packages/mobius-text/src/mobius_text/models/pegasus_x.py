"""PEGASUS-X: Pegasus's pre-norm stacks with a block-local encoder that carries global tokens.

The encoder pads the source to a multiple of ``block_size``; each token attends to
the ``num_global_tokens`` global states and to the tokens of its own block, and each
global state to every global state and every token. With ``stagger_local_blocks``,
odd layers shift the blocks by half a block (padding half a block on either side).
Global and token states share a layer's FFN and final norm; each has its own norm
before attention (``global_self_attn_layer_norm`` for the global ones). Memory grows
linearly with the source: scores are ``[batch, heads, blocks, block, global + block]``.
Positions are computed sinusoids (no table in the checkpoint, no length limit), the
embeddings are scaled, every attention projection is bias-free and there is no
``final_logits_bias``.
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
    lowest_value,
    merge_heads,
    split_heads,
)
from mobius_text.models.bart import (
    BartConfig,
    BartForConditionalGeneration,
    BartModel,
    PreNormDecoderLayer,
    PreNormEncoderLayer,
)
from mobius_text.models.mbart import MBartDecoder, MBartEncoder


@dataclass
class PegasusXConfig(BartConfig):
    num_global_tokens: int = 32
    block_size: int = 512
    stagger_local_blocks: bool = True

    @classmethod
    def from_hf(cls, hf: Any) -> PegasusXConfig:
        return cls(
            **vars(BartConfig.from_hf(hf)),
            num_global_tokens=hf.num_global_tokens,
            block_size=hf.block_size,
            stagger_local_blocks=bool(hf.stagger_local_blocks),
        )


class PegasusXSinusoids(nn.Module):
    """``[sin | cos]`` of ``position * 10000 ** (-j / (half - 1))``, computed for any position."""

    def __init__(self, num_positions: int, dim: int, padding_idx: int | None = None) -> None:
        super().__init__()
        half = dim // 2
        step = np.float32(-math.log(10000.0) / (half - 1))
        self.frequencies = np.exp(np.arange(half, dtype=np.float32) * step)  # float32, as torch

    def forward(self, op, positions):
        """``positions`` int64 ``[seq]`` → ``[seq, dim]`` float32."""
        angles = op.Mul(
            op.Unsqueeze(op.Cast(positions, to=ir.DataType.FLOAT), [-1]),
            op.Constant(value=ir.tensor(self.frequencies)),
        )  # [seq, half]
        return op.Concat(op.Sin(angles), op.Cos(angles), axis=-1)


def _pad_axis(op, x, axis: int, rank: int, before, after, value=None):
    """``x`` padded on ``axis`` by ``before``/``after`` (ints or int64 ``[1]``), with ``value`` (0)."""

    def amount(n):
        return op.Constant(value_ints=[n]) if isinstance(n, int) else n

    zero = op.Constant(value_ints=[0])
    begins = [amount(before) if i == axis else zero for i in range(rank)]
    ends = [amount(after) if i == axis else zero for i in range(rank)]
    pads = op.Concat(*begins, *ends, axis=0)
    return op.Pad(x, pads) if value is None else op.Pad(x, pads, value)


class PegasusXGlobalLocalAttention(nn.Module):
    """Tokens over the global states and their block; global states over everything."""

    def __init__(self, config: PegasusXConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (
            Linear(d, d, bias=False) for _ in range(4)
        )
        self.num_heads, self.head_dim = config.encoder_heads, d // config.encoder_heads
        self.block_size = config.block_size

    def project(self, op, x):
        """``(q, k, v)`` ``[batch, heads, seq, dim]``; ``q`` already scaled, as transformers does."""
        scale = op.CastLike(op.Constant(value_float=self.head_dim**-0.5), x)
        q = op.Mul(self.q_proj(op, x), scale)
        projected = (q, self.k_proj(op, x), self.v_proj(op, x))
        return tuple(split_heads(op, p, self.num_heads) for p in projected)

    def forward(self, op, x, g, bias):
        """``x [batch, seq, hidden]`` (seq a multiple of the block), ``g [batch, global, hidden]``,
        ``bias [batch, seq]`` additive (0 or the lowest value) → the new ``(x, g)``."""
        q, k, v = self.project(op, x)
        gq, gk, gv = self.project(op, g)
        # global queries: every global state, then every token
        keys, values = op.Concat(gk, k, axis=2), op.Concat(gv, v, axis=2)
        width = op.Shape(g, start=1, end=2)  # [1]: the global states
        mask = op.Unsqueeze(_pad_axis(op, bias, 1, 2, width, 0), [1, 2])  # [b, 1, 1, G + seq]
        scores = op.Add(op.MatMul(gq, op.Transpose(keys, perm=[0, 1, 3, 2])), mask)
        global_out = op.MatMul(op.Softmax(scores, axis=-1), values)  # [b, h, G, dim]
        # token queries, block by block: the global states, then the block's tokens
        blocks = op.Constant(value_ints=[0, self.num_heads, -1, self.block_size, self.head_dim])
        qb, kb, vb = (op.Reshape(t, blocks) for t in (q, k, v))  # [b, h, n, block, dim]
        to_global = op.MatMul(qb, op.Unsqueeze(op.Transpose(gk, perm=[0, 1, 3, 2]), [2]))
        to_local = op.MatMul(qb, op.Transpose(kb, perm=[0, 1, 2, 4, 3]))
        block_bias = op.Reshape(bias, op.Constant(value_ints=[0, -1, self.block_size]))
        mask = op.Unsqueeze(_pad_axis(op, block_bias, 2, 3, width, 0), [1, 3])  # [b,1,n,1,G+blk]
        probs = op.Softmax(op.Add(op.Concat(to_global, to_local, axis=-1), mask), axis=-1)
        big = op.Constant(value_ints=[np.iinfo(np.int64).max])
        from_global = op.MatMul(op.Slice(probs, [0], width, [-1]), op.Unsqueeze(gv, [2]))
        from_local = op.MatMul(op.Slice(probs, width, big, [-1]), vb)
        local_out = op.Reshape(
            op.Add(from_global, from_local), op.Constant(value_ints=[0, 0, -1, self.head_dim])
        )  # [b, h, seq, dim]
        return (
            self.out_proj(op, merge_heads(op, local_out)),
            self.out_proj(op, merge_heads(op, global_out)),
        )


class PegasusXEncoderLayer(PreNormEncoderLayer):
    """Pre-norm; tokens and global states share the attention and the FFN, not the first norm."""

    def __init__(self, config: PegasusXConfig, stagger: bool) -> None:
        super().__init__(config)
        self.self_attn = PegasusXGlobalLocalAttention(config)
        self.global_self_attn_layer_norm = LayerNorm(config.hidden_size, 1e-5)
        self.shift = config.block_size // 2 if stagger else 0

    def forward(self, op, x, g, bias):
        h = self.self_attn_layer_norm(op, x)
        gh = self.global_self_attn_layer_norm(op, g)
        if self.shift:  # half a block more on either side: the blocks move by half a block
            h = _pad_axis(op, h, 1, 3, self.shift, self.shift)
            low = op.CastLike(op.Constant(value_float=lowest_value(x.dtype)), bias)
            bias = _pad_axis(op, bias, 1, 2, self.shift, self.shift, low)
        h, gh = self.self_attn(op, h, gh, bias)
        if self.shift:
            h = op.Slice(h, [self.shift], [-self.shift], [1])
        x, g = op.Add(x, h), op.Add(g, gh)
        x = op.Add(x, self.mlp(op, self.final_layer_norm(op, x)))
        return x, op.Add(g, self.mlp(op, self.final_layer_norm(op, g)))


class PegasusXEncoder(MBartEncoder):
    """Scaled embeddings plus sinusoids, no embedding norm; ``layer_norm`` closes the stack."""

    positions_class = PegasusXSinusoids
    embedding_norm = False

    def __init__(self, config: PegasusXConfig) -> None:
        super().__init__(config, 0)
        stagger = config.stagger_local_blocks
        self.layers = nn.ModuleList(
            [
                PegasusXEncoderLayer(config, stagger and i % 2 == 1)
                for i in range(config.encoder_layers)
            ]
        )
        self.embed_global = Embedding(config.num_global_tokens, config.hidden_size)
        self.num_global_tokens, self.block_size = config.num_global_tokens, config.block_size

    def embed(self, op, input_ids, past_length):
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        if self.embed_scale != 1.0:
            x = op.Mul(x, op.CastLike(op.Constant(value_float=self.embed_scale), x))
        positions = self.embed_positions(op, self.position_ids(op, input_ids, past_length))
        return op.Add(x, op.CastLike(positions, x))

    def forward(self, op, input_ids, attention_mask):
        x = self.embed(op, input_ids, op.Constant(value_int=0))  # [batch, seq, hidden]
        zero = op.CastLike(op.Constant(value_float=0.0), x)
        low = op.CastLike(op.Constant(value_float=lowest_value(x.dtype)), x)
        bias = op.Where(op.Cast(attention_mask, to=ir.DataType.BOOL), zero, low)  # [batch, seq]
        seq = op.Shape(x, start=1, end=2)
        block = op.Constant(value_ints=[self.block_size])
        extra = op.Mod(op.Sub(block, op.Mod(seq, block)), block)  # to a multiple of the block
        x = _pad_axis(op, x, 1, 3, 0, extra)
        bias = _pad_axis(op, bias, 1, 2, 0, extra, low)
        ids = op.Constant(value_ints=list(range(self.num_global_tokens)))
        batch = op.Concat(op.Shape(x, start=0, end=1), op.Constant(value_ints=[1, 1]), axis=0)
        g = op.Expand(op.Unsqueeze(self.embed_global(op, ids), [0]), batch)  # [batch, G, hidden]
        for layer in self.layers:
            x, g = layer(op, x, g, bias)
        return self.finish(op, op.Slice(x, op.Constant(value_ints=[0]), seq, [1]))


class PegasusXDecoderLayer(PreNormDecoderLayer):
    def __init__(self, config: PegasusXConfig) -> None:
        super().__init__(config)
        d, heads = config.hidden_size, config.decoder_heads
        self.self_attn = Seq2SeqAttention(d, heads, bias=False)
        self.encoder_attn = CrossAttention(d, heads, bias=False)


class PegasusXDecoder(MBartDecoder):
    layer_class = PegasusXDecoderLayer
    positions_class = PegasusXSinusoids
    embedding_norm = False
    embed = PegasusXEncoder.embed


class PegasusXModel(BartModel):
    encoder_class = PegasusXEncoder
    decoder_class = PegasusXDecoder


class PegasusXForConditionalGeneration(BartForConditionalGeneration):
    config_class = PegasusXConfig
    model_class = PegasusXModel
    logits_bias = False


MODEL_TYPES = {"pegasus_x": PegasusXForConditionalGeneration}
