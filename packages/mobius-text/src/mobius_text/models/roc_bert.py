"""RoCBert: BERT whose embeddings also read each token's glyph shape and pronunciation ids.

The graph takes ``input_shape_ids`` and ``input_pronunciation_ids`` int64
[batch, sequence] after the text contract's inputs (each only where the config
enables it). With ``concat_input`` (the default) the word, shape and pronunciation
vectors are concatenated and mapped to the hidden size (``map_inputs_layer``) before
BERT's token types, positions and LayerNorm; without ids transformers reads zeros, and
so does ``mobius embed``. Without ``concat_input`` the shape and pronunciation vectors
are averaged with BERT's normalised embeddings, and an absent input is left out of the
mean (not zeros): ``mobius embed`` refuses such a package. The checkpoint is BERT's tree
under ``roc_bert.``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir

from mobius.components import Embedding, Linear
from mobius_text.models.bert import BertConfig, BertEmbeddings, BertForFeatureExtraction, BertModel

SHAPE, PRONUNCIATION = "input_shape_ids", "input_pronunciation_ids"


@dataclass
class RoCBertConfig(BertConfig):
    enable_shape: bool = True
    enable_pronunciation: bool = True
    shape_vocab_size: int = 0
    shape_embed_dim: int = 0
    pronunciation_vocab_size: int = 0
    pronunciation_embed_dim: int = 0
    concat_input: bool = True

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        for name in (
            "enable_shape", "enable_pronunciation", "shape_vocab_size", "shape_embed_dim",
            "pronunciation_vocab_size", "pronunciation_embed_dim", "concat_input",
        ):  # fmt: skip
            fields[name] = getattr(hf_config, name)
        return fields

    @property
    def extra_ids(self) -> tuple[str, ...]:
        """The id inputs the embeddings read, in transformers' concatenation order."""
        return (SHAPE,) * self.enable_shape + (PRONUNCIATION,) * self.enable_pronunciation


class RoCBertEmbeddings(BertEmbeddings):
    """BERT's embeddings plus ``shape_embed`` and ``pronunciation_embed`` (concatenated or averaged)."""

    def __init__(self, config: RoCBertConfig) -> None:
        super().__init__(config)
        self.shape_embed = self.pronunciation_embed = None  # a disabled input's table: unread
        if config.enable_shape:
            self.shape_embed = Embedding(config.shape_vocab_size, config.shape_embed_dim)
        if config.enable_pronunciation:
            self.pronunciation_embed = Embedding(
                config.pronunciation_vocab_size, config.pronunciation_embed_dim
            )
        self.extra_ids, self.map_inputs_layer = config.extra_ids, None
        if config.concat_input:
            width = config.hidden_size
            width += config.shape_embed_dim if config.enable_shape else 0
            width += config.pronunciation_embed_dim if config.enable_pronunciation else 0
            self.map_inputs_layer = Linear(width, config.hidden_size, bias=True)

    def id_embeddings(self, op, ids: dict) -> list:
        """The enabled shape and pronunciation vectors, each ``[batch, seq, its dim]``."""
        tables = {SHAPE: self.shape_embed, PRONUNCIATION: self.pronunciation_embed}
        return [tables[name](op, ids[name]) for name in self.extra_ids]

    def forward(self, op, input_ids, token_type_ids, position_ids=None, **ids):
        if self.map_inputs_layer is None:  # the mean of BERT's embeddings and the id vectors
            x = super().forward(op, input_ids, token_type_ids, position_ids)
            parts = self.id_embeddings(op, ids)
            for part in parts:
                x = op.Add(x, part)
            return op.Div(x, float(1 + len(parts)))  # transformers divides by the count
        words = self.word_embeddings(op, input_ids)  # [batch, seq, hidden]
        x = op.Concat(words, *self.id_embeddings(op, ids), axis=-1)  # [batch, seq, width]
        x = self.map_inputs_layer(op, x)  # [batch, seq, hidden]
        if self.token_type_embeddings is not None:
            x = op.Add(x, self.token_type_embedding(op, token_type_ids))
        if position_ids is None:
            position_ids = self.position_ids(op, input_ids)
        return self.LayerNorm(op, op.Add(x, self.position_embeddings(op, position_ids)))


class RoCBertModel(BertModel):
    embeddings_class = RoCBertEmbeddings


class RoCBertForFeatureExtraction(BertForFeatureExtraction):
    """BERT's heads (masked LM, classification, span, choice) on the RoCBert encoder."""

    config_class = RoCBertConfig
    base_model_prefix = "roc_bert"
    model_class = RoCBertModel

    def __init__(self, config: RoCBertConfig) -> None:
        super().__init__(config)
        # concat_input: transformers reads zeros for absent ids; otherwise it leaves them out
        self.zeros_when_absent = config.extra_ids if config.concat_input else ()

    @property
    def ignored(self) -> tuple[str, ...]:
        """BERT's, plus the shape or pronunciation table a disabled input leaves unread."""
        unread = [
            f"roc_bert.embeddings.{table}.*"
            for name, table in ((SHAPE, "shape_embed"), (PRONUNCIATION, "pronunciation_embed"))
            if name not in self.config.extra_ids
        ]
        return (*super().ignored, *unread)

    def extra_inputs(self) -> dict[str, tuple[ir.DataType, list]]:
        return {name: (ir.DataType.INT64, ["batch", "sequence"]) for name in self.config.extra_ids}


MODEL_TYPES = {"roc_bert": RoCBertForFeatureExtraction}
