"""LED (Longformer encoder–decoder): BART whose encoder attends within a sliding window.

Encoder layer ``i`` lets each token see the real tokens at most ``attention_window[i]
// 2`` positions away (Longformer's local attention), computed in blocks of that
one-sided width ``w``: the queries of a block read the keys of it and its two
neighbours, ``[batch, heads, blocks, w, 3w]`` scores, so memory grows linearly with
the source. Global attention needs a ``global_attention_mask`` input, which the
two-graph contract has not: the graphs are LED without it (transformers' default),
and the ``*_global`` projections go unused. Learned positions from row 0, separate
encoder and decoder tables (``max_encoder_position_embeddings`` /
``max_decoder_position_embeddings``); the checkpoint's root is ``led``, not ``model``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, lowest_value, merge_heads, split_heads
from mobius_text.models.bart import (
    BartConfig,
    BartDecoder,
    BartEncoder,
    BartEncoderLayer,
    BartForConditionalGeneration,
    BartModel,
    PositionsFromRowZero,
)


@dataclass
class LEDConfig(BartConfig):
    attention_window: list[int] = field(default_factory=list)  # per encoder layer
    max_encoder_position_embeddings: int = 16384

    @classmethod
    def from_hf(cls, hf: Any) -> LEDConfig:
        """BART's fields; the decoder's table is ``max_position_embeddings``."""
        window = hf.attention_window
        windows = [window] * hf.encoder_layers if isinstance(window, int) else list(window)
        shim = _WithPositions(hf, hf.max_decoder_position_embeddings)
        return cls(
            **vars(BartConfig.from_hf(shim)),
            attention_window=windows,
            max_encoder_position_embeddings=hf.max_encoder_position_embeddings,
        )


class _WithPositions:
    """``hf`` with a ``max_position_embeddings`` (LED's config has one per stack)."""

    def __init__(self, hf: Any, max_position_embeddings: int) -> None:
        self.hf, self.max_position_embeddings = hf, max_position_embeddings

    def __getattr__(self, name: str) -> Any:
        return getattr(self.hf, name)


def _pad_blocks(op, x, width: int, padded, rank: int, axis: int):
    """``x`` padded on ``axis``: one ``width`` block in front, ``padded`` plus one block behind."""
    zero = op.Constant(value_ints=[0])
    begin = [zero] * rank
    begin[axis] = op.Constant(value_ints=[width])
    end = [zero] * rank
    end[axis] = op.Add(padded, op.Constant(value_ints=[width]))
    return op.Pad(x, op.Concat(*begin, *end, axis=0))


def _windows(op, blocked, axis: int):
    """Each block beside its two neighbours: ``[..., blocks + 2, w, ...]`` → ``[..., blocks, 3w, ...]``."""
    ends = [-2, -1, np.iinfo(np.int64).max]
    parts = [op.Slice(blocked, [s], [e], [axis]) for s, e in zip((0, 1, 2), ends, strict=True)]
    return op.Concat(*parts, axis=axis + 1)


def sliding_window_attention(op, q, k, v, real, width: int, scale: float, dtype: ir.DataType):
    """Longformer local attention: ``q``/``k``/``v`` ``[batch, heads, seq, dim]``, ``real [batch, seq]`` int64.

    Masked scores get the lowest value of ``dtype`` (the model's), as transformers
    adds, never ``-inf``: a pad query with no real key in reach stays finite.
    """
    seq = op.Shape(q, start=2, end=3)
    size = op.Constant(value_ints=[width])
    padded = op.Sub(
        op.Mul(op.Div(op.Add(seq, op.Constant(value_ints=[width - 1])), size), size), seq
    )
    batch_heads, dim = op.Shape(q, start=0, end=2), op.Shape(q, start=3, end=4)
    blocks = op.Concat(batch_heads, op.Constant(value_ints=[-1, width]), dim, axis=0)
    zero = op.Constant(value_ints=[0])
    query = op.Pad(q, op.Concat(zero, zero, zero, zero, zero, zero, padded, zero, axis=0))
    query = op.Reshape(query, blocks)  # [b, h, blocks, w, d]
    key, value = (
        _windows(op, op.Reshape(_pad_blocks(op, x, width, padded, 4, 2), blocks), 2) for x in (k, v)
    )
    scores = op.MatMul(query, op.Transpose(key, perm=[0, 1, 2, 4, 3]))  # [b, h, blocks, w, 3w]
    scores = op.Mul(scores, op.CastLike(op.Constant(value_float=scale), scores))
    keys = _pad_blocks(op, real, width, padded, 2, 1)  # pads and the blocks beyond the ends: 0
    keys = op.Reshape(keys, op.Concat(op.Shape(real, start=0, end=1), [-1, width], axis=0))
    keys = op.Cast(
        op.Unsqueeze(_windows(op, keys, 1), [1, 3]), to=ir.DataType.BOOL
    )  # [b, 1, blocks, 1, 3w]
    r, t = np.arange(width)[:, None], np.arange(3 * width)[None, :]
    band = op.Constant(
        value=ir.tensor(np.abs(t - r - width) <= width)
    )  # [w, 3w]: |key - query| <= w
    zero_f = op.CastLike(op.Constant(value_float=0.0), scores)
    lowest = op.CastLike(op.Constant(value_float=lowest_value(dtype)), scores)
    scores = op.Add(scores, op.Where(op.And(band, keys), zero_f, lowest))
    y = op.MatMul(op.Softmax(scores, axis=-1), value)  # [b, h, blocks, w, d]
    y = op.Reshape(y, op.Concat(batch_heads, op.Constant(value_ints=[-1]), dim, axis=0))
    return op.Slice(y, zero, seq, [2])


class LEDEncoderSelfAttention(nn.Module):
    def __init__(self, config: LEDConfig, layer: int) -> None:
        super().__init__()
        d = config.hidden_size
        self.query, self.key, self.value = (Linear(d, d, bias=True) for _ in range(3))
        self.num_heads, self.head_dim = config.encoder_heads, d // config.encoder_heads
        self.width = config.attention_window[layer] // 2

    def forward(self, op, x, real):
        q, k, v = (
            split_heads(op, proj(op, x), self.num_heads, self.head_dim)
            for proj in (self.query, self.key, self.value)
        )
        scale, dtype = self.head_dim**-0.5, self.query.weight.dtype
        y = sliding_window_attention(op, q, k, v, real, self.width, scale, dtype)
        return merge_heads(op, y)


class LEDEncoderAttention(nn.Module):
    def __init__(self, config: LEDConfig, layer: int) -> None:
        super().__init__()
        self.longformer_self_attn = LEDEncoderSelfAttention(config, layer)
        self.output = Linear(config.hidden_size, config.hidden_size, bias=True)

    def forward(self, op, x, real):
        return self.output(op, self.longformer_self_attn(op, x, real))


class LEDEncoderLayer(BartEncoderLayer):
    """BART's post-norm layer; its ``bias`` argument is the ``attention_mask``."""

    def __init__(self, config: LEDConfig, layer: int) -> None:
        super().__init__(config)
        self.self_attn = LEDEncoderAttention(config, layer)


class LEDEncoder(BartEncoder):
    positions_class = PositionsFromRowZero

    def __init__(self, config: LEDConfig) -> None:
        super().__init__(config, 0)
        d = config.hidden_size
        self.embed_positions = self.positions_class(config.max_encoder_position_embeddings, d)
        self.layers = nn.ModuleList(
            [LEDEncoderLayer(config, i) for i in range(config.encoder_layers)]
        )

    def forward(self, op, input_ids, attention_mask):
        x = self.embed(op, input_ids, op.Constant(value_int=0))
        for layer in self.layers:
            x = layer(op, x, attention_mask)
        return self.finish(op, x)


class LEDDecoder(BartDecoder):
    positions_class = PositionsFromRowZero


class LEDModel(BartModel):
    encoder_class = LEDEncoder
    decoder_class = LEDDecoder


class LEDForConditionalGeneration(BartForConditionalGeneration):
    config_class = LEDConfig
    model_class = LEDModel
    ignored = ("*.longformer_self_attn.*_global.*",)  # global attention: not in the contract

    def sanitize(self, weights: dict) -> dict:
        """The checkpoint's ``led.`` root is BART's ``model.``."""
        weights = {f"model.{k[4:]}" if k.startswith("led.") else k: v for k, v in weights.items()}
        return super().sanitize(weights)


MODEL_TYPES = {"led": LEDForConditionalGeneration}
