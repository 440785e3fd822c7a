"""LayoutLM: BERT whose embeddings add each token's box on the page (``bbox``).

The graph takes ``bbox`` int64 [batch, sequence, 4] (x0, y0, x1, y1 in
``0..max_2d_position_embeddings-1``) after the text contract's inputs; its embeddings
add the x, y, height and width embeddings of the boxes to BERT's. Without boxes
transformers reads zeros, and so does ``mobius embed``. The checkpoint is BERT's tree
under ``layoutlm.`` (``cls.*``, ``classifier``, ``qa_outputs``); transformers has no
multiple-choice head for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir

from mobius.components import Embedding
from mobius.errors import ConfigError
from mobius_text.models.bert import BertConfig, BertEmbeddings, BertForFeatureExtraction, BertModel


@dataclass
class LayoutLMConfig(BertConfig):
    max_2d_position_embeddings: int = 1024

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        fields["max_2d_position_embeddings"] = hf_config.max_2d_position_embeddings
        return fields


class LayoutLMEmbeddings(BertEmbeddings):
    """BERT's embeddings plus the box's corners, height and width (``x/y/h/w_position_embeddings``)."""

    def __init__(self, config: LayoutLMConfig) -> None:
        super().__init__(config)
        size, hidden = config.max_2d_position_embeddings, config.hidden_size
        self.x_position_embeddings = Embedding(size, hidden)
        self.y_position_embeddings = Embedding(size, hidden)
        self.h_position_embeddings = Embedding(size, hidden)
        self.w_position_embeddings = Embedding(size, hidden)

    def forward(self, op, input_ids, token_type_ids, position_ids=None, bbox=None):
        x = self.word_embeddings(op, input_ids)  # [batch, seq, hidden]
        if self.token_type_embeddings is not None:
            x = op.Add(x, self.token_type_embedding(op, token_type_ids))
        if position_ids is None:
            position_ids = self.position_ids(op, input_ids)
        x = op.Add(x, self.position_embeddings(op, position_ids))
        x0, y0, x1, y1 = op.Split(bbox, num_outputs=4, axis=-1, _outputs=4)  # [batch, seq, 1]
        boxes = [
            self.x_position_embeddings(op, x0),
            self.y_position_embeddings(op, y0),
            self.x_position_embeddings(op, x1),
            self.y_position_embeddings(op, y1),
            self.h_position_embeddings(op, op.Sub(y1, y0)),
            self.w_position_embeddings(op, op.Sub(x1, x0)),
        ]  # each [batch, seq, 1, hidden]
        for part in boxes:
            x = op.Add(x, op.Squeeze(part, [2]))
        return self.LayerNorm(op, x)


class LayoutLMModel(BertModel):
    embeddings_class = LayoutLMEmbeddings


class LayoutLMForFeatureExtraction(BertForFeatureExtraction):
    """BERT's masked-LM, classification and span heads on the LayoutLM encoder (``layoutlm.*``)."""

    config_class = LayoutLMConfig
    base_model_prefix = "layoutlm"
    model_class = LayoutLMModel
    zeros_when_absent = ("bbox",)  # transformers' LayoutLMModel reads zeros without boxes

    def __init__(self, config: LayoutLMConfig) -> None:
        if config.head == "multiple-choice":
            raise ConfigError(
                "--head multiple-choice is not built for layoutlm: transformers has none"
            )
        super().__init__(config)

    def extra_inputs(self) -> dict[str, tuple[ir.DataType, list]]:
        return {"bbox": (ir.DataType.INT64, ["batch", "sequence", 4])}


MODEL_TYPES = {"layoutlm": LayoutLMForFeatureExtraction}
