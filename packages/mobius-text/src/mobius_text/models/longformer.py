"""Longformer: RoBERTa's tree with sliding-window attention and head-chosen global tokens.

What differs from RoBERTa:

- each layer's queries attend the keys within ``attention_window[layer] // 2`` tokens
  on either side, plus every global token; a global token's query attends every real
  key with its own projections (``query_global``, ``key_global``, ``value_global``);
- transformers pads the sequence to a multiple of the largest window with masked pad
  tokens; masked keys change nothing, so the graph does not pad;
- the global tokens are what transformers' heads put there when no
  ``global_attention_mask`` is given (the graph has no such input): none for the bare
  encoder, masked LM and token classification (their ``*_global`` projections stay
  unread); the first token for sequence classification; the question (the tokens
  before the first ``sep_token_id``) for question answering; the tokens after the
  first two separators (the choice) for multiple choice.

The attention is dense and masked: ``[batch, heads, seq, seq]`` scores per layer (twice
with global tokens), where transformers' banded kernel keeps ``seq * (window + 1)``; at
4096 tokens and 12 heads that is 0.8 GB of fp32 scores per layer, against 25 MB.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, bidirectional_attention, lowest_value, padding_bias
from mobius.errors import ConfigError
from mobius_text.models.bert import BertAttention, BertEncoder, BertLayer
from mobius_text.models.roberta import (
    RobertaConfig,
    RobertaEmbeddings,
    RobertaForFeatureExtraction,
    RobertaModel,
)

INT64 = ir.DataType.INT64
#: heads whose transformers class sets global attention itself
GLOBAL_HEADS = ("sequence-classification", "question-answering", "multiple-choice")


@dataclass
class LongformerConfig(RobertaConfig):
    """RoBERTa's fields plus each layer's one-sided window and the separator id."""

    windows: list[int] = field(default_factory=list)
    sep_token_id: int | None = 2

    @property
    def global_attention(self) -> bool:
        return self.head in GLOBAL_HEADS

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        window = hf_config.attention_window
        windows = [window] * fields["num_hidden_layers"] if isinstance(window, int) else window
        if len(windows) != fields["num_hidden_layers"] or any(w <= 0 or w % 2 for w in windows):
            raise ConfigError(f"attention_window {window!r}: one even positive size per layer")
        return {
            **fields,
            "windows": [int(w) // 2 for w in windows],
            "sep_token_id": getattr(hf_config, "sep_token_id", None),
        }


def global_tokens(op, input_ids, real, head: str, sep_token_id: int | None):
    """``[batch, seq]`` bool: the tokens transformers' ``head`` gives global attention."""
    seq = op.Shape(input_ids, start=1, end=2)
    positions = op.Unsqueeze(op.Range(0, op.Squeeze(seq, [0]), 1), [0])  # [1, seq]
    if head == "sequence-classification":  # the <s> token
        chosen = op.Equal(positions, op.Constant(value_int=0))
    else:  # the first separator ends the question (transformers asserts three per row)
        if sep_token_id is None:
            raise ConfigError(f"--head {head} puts global attention by sep_token_id; none set")
        sep = op.Constant(value=ir.tensor(sep_token_id, dtype=INT64))
        is_sep = op.Cast(op.Equal(input_ids, sep), to=ir.DataType.INT32)
        end = op.ArgMax(is_sep, axis=1, keepdims=1)  # [batch, 1]: the first separator
        if head == "question-answering":  # the question, before it
            chosen = op.Less(positions, end)
        else:  # the choice, after the two separators that follow the question
            chosen = op.Greater(positions, op.Add(end, op.Constant(value_int=1)))
    return op.And(chosen, real)


@dataclass
class Masks:
    """What the layers read: token distances ``[seq, seq]``, real keys, the padding bias, and
    the global tokens as keys ``[batch, 1, 1, seq]`` and rows ``[batch, seq, 1]`` (or None)."""

    distances: ir.Value
    real_keys: ir.Value
    padding: ir.Value
    global_keys: ir.Value | None = None
    global_rows: ir.Value | None = None


class LongformerSelfAttention(nn.Module):
    """Window-and-global attention for local queries; global queries with ``*_global``."""

    def __init__(self, config: LongformerConfig) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.query = Linear(hidden, hidden, bias=True)
        self.key = Linear(hidden, hidden, bias=True)
        self.value = Linear(hidden, hidden, bias=True)
        if config.global_attention:
            self.query_global = Linear(hidden, hidden, bias=True)
            self.key_global = Linear(hidden, hidden, bias=True)
            self.value_global = Linear(hidden, hidden, bias=True)
        else:  # no global token: the projections stay unread (see ``ignored``)
            self.query_global = self.key_global = self.value_global = None
        self.num_heads, self.scale = config.num_attention_heads, config.head_dim**-0.5

    def forward(self, op, x, masks):
        """``masks``: (window bias ``[b, 1, s, s]``, padding bias, global rows ``[b, s, 1]`` or None)."""
        local_bias, padding, global_rows = masks
        q, k, v = self.query(op, x), self.key(op, x), self.value(op, x)
        y = bidirectional_attention(op, q, k, v, local_bias, self.num_heads, self.scale)
        if global_rows is None:
            return y
        qg, kg, vg = (p(op, x) for p in (self.query_global, self.key_global, self.value_global))
        g = bidirectional_attention(op, qg, kg, vg, padding, self.num_heads, self.scale)
        return op.Where(global_rows, g, y)  # [batch, seq, hidden]


class LongformerLayer(BertLayer):
    def __init__(self, config: LongformerConfig) -> None:
        super().__init__(config, BertAttention(config, LongformerSelfAttention(config)))


class LongformerEncoder(BertEncoder):
    """BERT's layers, each with the bias of its window."""

    layer_class = LongformerLayer

    def __init__(self, config: LongformerConfig) -> None:
        super().__init__(config)
        self.windows = config.windows

    def forward(self, op, x, masks: Masks):
        lowest = op.CastLike(op.Constant(value_float=lowest_value(x.dtype)), x)
        zero = op.CastLike(op.Constant(value_float=0.0), x)
        biases: dict[int, ir.Value] = {}
        for layer, window in zip(self.layer, self.windows, strict=True):
            if window not in biases:  # [b, 1, s, s]: real keys in the window or global
                w = op.Constant(value=ir.tensor(window, dtype=INT64))
                allowed = op.LessOrEqual(masks.distances, w)  # [s, s]
                if masks.global_keys is not None:
                    allowed = op.Or(allowed, masks.global_keys)
                biases[window] = op.Where(op.And(allowed, masks.real_keys), zero, lowest)
            x = layer(op, x, (biases[window], masks.padding, masks.global_rows))
        return x


class LongformerModel(RobertaModel):
    embeddings_class = RobertaEmbeddings
    encoder_class = LongformerEncoder

    def __init__(self, config: LongformerConfig) -> None:
        super().__init__(config)
        self.head = config.head if config.global_attention else None
        self.sep_token_id = config.sep_token_id

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        x = self.embeddings(op, input_ids, token_type_ids)  # [batch, seq, hidden]
        seq = op.Squeeze(op.Shape(input_ids, start=1, end=2), [0])
        positions = op.Range(0, seq, 1)  # [seq]
        real = op.Cast(attention_mask, to=ir.DataType.BOOL)  # [batch, seq]
        masks = Masks(
            distances=op.Abs(op.Sub(op.Unsqueeze(positions, [1]), op.Unsqueeze(positions, [0]))),
            real_keys=op.Unsqueeze(real, [1, 2]),  # [batch, 1, 1, seq]
            padding=padding_bias(op, attention_mask, x.dtype),
        )
        if self.head is not None:
            tokens = global_tokens(op, input_ids, real, self.head, self.sep_token_id)
            masks.global_keys = op.Unsqueeze(tokens, [1, 2])  # [batch, 1, 1, seq]
            masks.global_rows = op.Unsqueeze(tokens, [2])  # [batch, seq, 1]
        return self.encoder(op, x, masks)


class LongformerForFeatureExtraction(RobertaForFeatureExtraction):
    """RoBERTa's tree under ``longformer.*`` (``lm_head``, ``classifier``, ``qa_outputs``)."""

    config_class = LongformerConfig
    base_model_prefix = "longformer"
    model_class = LongformerModel

    @property
    def ignored(self) -> tuple[str, ...]:
        ignored = super().ignored
        if not self.config.global_attention:  # transformers reads them for global tokens only
            ignored += tuple(
                f"longformer.encoder.layer.*.attention.self.{name}_global.*"
                for name in ("query", "key", "value")
            )
        return ignored


MODEL_TYPES = {"longformer": LongformerForFeatureExtraction}
