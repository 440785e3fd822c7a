"""TAPAS: BERT over a flattened table, whose token types are seven columns of ids.

The graph's ``token_type_ids`` is int64 [batch, sequence, 7] (segment, column, row,
previous label, column rank, inverse rank, numeric relation), in place of the text
contract's [batch, sequence]; each column has its own embedding table
(``token_type_embeddings_0..6``). With ``reset_position_index_per_cell`` the position
of a token counts from the first token of its table cell (its column and row ids),
capped at the last position. Without token types transformers reads zeros (every
token in one cell: plain positions), and so does ``mobius embed``.

Heads: masked LM and sequence classification. TAPAS's question answering selects table
cells (token logits [batch, sequence] and aggregation logits), not an answer span, so
``--head question-answering`` is refused; transformers has no token-classification or
multiple-choice head for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import onnx_ir as ir

from mobius.components import Embedding
from mobius.errors import ConfigError
from mobius_text.models.bert import BertConfig, BertEmbeddings, BertForFeatureExtraction, BertModel

HEADS = ("none", "masked-lm", "sequence-classification", "sentence-embedding")


@dataclass
class TapasConfig(BertConfig):
    type_vocab_sizes: tuple[int, ...] = field(default_factory=tuple)
    reset_position_index_per_cell: bool = True

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        fields["type_vocab_size"] = 0  # no single token-type table: one per column
        fields["type_vocab_sizes"] = tuple(hf_config.type_vocab_sizes)
        fields["reset_position_index_per_cell"] = hf_config.reset_position_index_per_cell
        return fields


class TapasEmbeddings(BertEmbeddings):
    """Words, positions (per cell or absolute) and one token-type table per column, normalised."""

    def __init__(self, config: TapasConfig) -> None:
        super().__init__(config)
        self.type_columns = len(config.type_vocab_sizes)
        for i, size in enumerate(config.type_vocab_sizes):
            setattr(self, f"token_type_embeddings_{i}", Embedding(size, config.hidden_size))
        self.rows = config.type_vocab_sizes[2]  # row ids are below this
        self.reset_per_cell = config.reset_position_index_per_cell
        self.last_position = config.max_position_embeddings - 1

    def cell_positions(self, op, input_ids, token_type_ids):
        """``[batch, seq]``: each token's position minus its cell's first position, capped."""
        column = op.Gather(token_type_ids, op.Constant(value_int=1), axis=2)  # [batch, seq]
        row = op.Gather(token_type_ids, op.Constant(value_int=2), axis=2)
        cell = op.Add(op.Mul(column, op.Constant(value_int=self.rows)), row)  # one id per cell
        same = op.Equal(op.Unsqueeze(cell, [2]), op.Unsqueeze(cell, [1]))  # [batch, seq, seq]
        seq_len = op.Squeeze(op.Shape(input_ids, start=1, end=2), [0])
        position = op.Range(op.Constant(value_int=0), seq_len, op.Constant(value_int=1))  # [seq]
        # the first position of each token's cell: the least position among its cell's tokens
        first = op.ReduceMin(op.Where(same, position, seq_len), [2], keepdims=0)  # [batch, seq]
        return op.Min(op.Sub(position, first), op.Constant(value_int=self.last_position))

    def forward(self, op, input_ids, token_type_ids, position_ids=None):
        x = self.word_embeddings(op, input_ids)  # [batch, seq, hidden]
        if position_ids is None:
            position_ids = (
                self.cell_positions(op, input_ids, token_type_ids)
                if self.reset_per_cell
                else self.position_ids(op, input_ids)
            )
        x = op.Add(x, self.position_embeddings(op, position_ids))
        for i in range(self.type_columns):  # column i of [batch, seq, 7]
            table = getattr(self, f"token_type_embeddings_{i}")
            x = op.Add(x, table(op, op.Gather(token_type_ids, op.Constant(value_int=i), axis=2)))
        return self.LayerNorm(op, x)


class TapasModel(BertModel):
    embeddings_class = TapasEmbeddings


class TapasForFeatureExtraction(BertForFeatureExtraction):
    """BERT's masked-LM and sequence-classification heads on the TAPAS encoder (``tapas.*``)."""

    config_class = TapasConfig
    base_model_prefix = "tapas"
    model_class = TapasModel
    zeros_when_absent = ("token_type_ids",)  # transformers reads zeros without them

    def __init__(self, config: TapasConfig) -> None:
        if config.head == "question-answering":
            raise ConfigError(
                "--head question-answering is not built for tapas: its head selects table "
                "cells (token and aggregation logits), not an answer span"
            )
        if config.head not in HEADS:
            raise ConfigError(f"--head {config.head} is not built for tapas: transformers has none")
        super().__init__(config)

    def extra_inputs(self) -> dict[str, tuple[ir.DataType, list]]:
        columns = len(self.config.type_vocab_sizes)
        return {"token_type_ids": (ir.DataType.INT64, ["batch", "sequence", columns])}


MODEL_TYPES = {"tapas": TapasForFeatureExtraction}
