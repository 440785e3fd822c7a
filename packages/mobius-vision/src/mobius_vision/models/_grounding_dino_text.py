"""Grounding DINO's text side: the prompt's phrase masks and positions, BERT under
``model.text_backbone`` (mobius-text's embeddings and encoder, at the phrases' positions and
with each phrase attending to itself), and the sines of the text positions the encoder adds.

A prompt ("a cat. a remote control.") is split into phrases by BERT's ids of ``[CLS]``,
``[SEP]``, ``.`` and ``?`` (:data:`PHRASE_DELIMITERS`, which transformers hard-codes);
:func:`phrase_masks` is transformers' ``generate_masks_with_special_tokens_and_transfer_map``
in ONNX ops.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius_text.models.bert import BertConfig, BertEmbeddings, BertEncoder
from mobius_vision.models._detr import float_constant, frequencies, sine_cosine

#: transformers' ``SPECIAL_TOKENS``: BERT's ids of [CLS], [SEP], "." and "?", which end phrases.
PHRASE_DELIMITERS = (101, 102, 1012, 1029)
#: The temperature of the text positions' sines (``encode_sinusoidal_position_embedding``'s).
TEXT_TEMPERATURE = 10000


def phrase_masks(op, input_ids, delimiters):
    """``(self-attention mask bool [batch, seq, seq], position ids int64 [batch, seq])``:
    each token sees the tokens of its phrase (those up to the same next delimiter, the
    delimiter included) and itself; a phrase whose delimiter is the first or last token,
    or that has none, is no phrase (its tokens see only themselves, at position 0).
    Positions count from the previous delimiter."""
    int64 = ir.DataType.INT64
    is_delimiter = op.Equal(op.Unsqueeze(input_ids, [-1]), op.Constant(value_ints=list(delimiters)))
    is_delimiter = op.Cast(
        op.ReduceMax(op.Cast(is_delimiter, to=int64), op.Constant(value_ints=[-1]), keepdims=0),
        to=ir.DataType.BOOL,
    )  # [batch, seq]
    length = op.Shape(input_ids, start=1, end=2)
    index = op.Range(op.Constant(value_int=0), op.Squeeze(length), op.Constant(value_int=1))
    row, column = op.Unsqueeze(index, [1]), op.Unsqueeze(index, [0])  # [seq, 1], [1, seq]
    candidate = op.Unsqueeze(is_delimiter, [1])  # [batch, 1, seq]: key j is a delimiter
    # the next delimiter at or after each token, else seq; the previous one before it, else -1
    ahead = op.Where(op.And(candidate, op.GreaterOrEqual(column, row)), column, length)
    next_delimiter = op.ReduceMin(ahead, op.Constant(value_ints=[-1]), keepdims=0)
    minus_one = op.Constant(value_ints=[-1])
    behind = op.Where(op.And(candidate, op.Less(column, row)), column, minus_one)
    previous = op.ReduceMax(behind, op.Constant(value_ints=[-1]), keepdims=0)
    last = op.Sub(length, op.Constant(value_ints=[1]))
    in_phrase = op.And(
        op.Not(op.Equal(next_delimiter, op.Constant(value_ints=[0]))),
        op.Less(next_delimiter, last),
    )
    same = op.Equal(op.Unsqueeze(next_delimiter, [2]), op.Unsqueeze(next_delimiter, [1]))
    mask = op.Or(op.And(same, op.Unsqueeze(in_phrase, [1])), op.Equal(row, column))
    positions = op.Sub(op.Sub(op.Unsqueeze(index, [0]), previous), op.Constant(value_ints=[1]))
    zero = op.Constant(value_ints=[0])
    positions = op.Max(op.Where(in_phrase, positions, zero), zero)
    return mask, positions


def attention_bias(op, allowed, like):
    """An additive bias ``[batch, 1, q, k]``: 0 where ``allowed [batch, q, k]``, the lowest
    float elsewhere (transformers' ``(1 - mask) * finfo.min``)."""
    lowest = float_constant(op, np.finfo(np.float32).min, like)
    zero = float_constant(op, 0.0, like)
    return op.Unsqueeze(op.Where(allowed, zero, lowest), [1])


class GroundingDinoTextEmbeddings(BertEmbeddings):
    """BERT's embeddings at the phrases' position ids (every token of token type 0)."""

    def forward(self, op, input_ids, position_ids):
        x = self.word_embeddings(op, input_ids)
        x = op.Add(x, self.token_type_embedding(op, None))
        x = op.Add(x, self.position_embeddings(op, position_ids))
        return self.LayerNorm(op, x)


class GroundingDinoTextBackbone(nn.Module):
    """``model.text_backbone``: BERT without its pooler, each phrase attending to itself."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.embeddings = GroundingDinoTextEmbeddings(config)
        self.encoder = BertEncoder(config)

    def forward(self, op, input_ids, phrase_mask, position_ids):
        hidden = self.embeddings(op, input_ids, position_ids)
        return self.encoder(op, hidden, attention_bias(op, phrase_mask, hidden))


def text_position_sines(op, position_ids, num_features: int, like):
    """transformers' one-coordinate ``encode_sinusoidal_position_embedding`` of the text
    position ids: ``[batch, seq, num_features]``."""
    positions = op.Unsqueeze(op.CastLike(position_ids, like), [-1])
    angles = op.Div(
        op.Mul(positions, float_constant(op, 2 * np.pi, like)),
        frequencies(op, num_features, like, TEXT_TEMPERATURE),
    )
    return sine_cosine(op, angles, num_features)
