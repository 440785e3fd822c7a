"""ERNIE: BERT with optional task-type embeddings, under the ``ernie.`` checkpoint prefix.

With ``use_task_id`` the embeddings add ``task_type_embeddings``; the graph has no
``task_type_ids`` input (the feature-extraction contract), so every token gets task
type 0, as transformers does when none are passed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mobius.components import Embedding
from mobius_text.models._bert_common import DecoderConfig, EncoderAsCausalLM
from mobius_text.models.bert import BertConfig, BertEmbeddings, BertForFeatureExtraction, BertModel


@dataclass
class ErnieConfig(BertConfig):
    task_type_vocab_size: int = 0  # 0: no task-type embeddings (use_task_id=False)

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        if getattr(hf_config, "use_task_id", False):
            fields["task_type_vocab_size"] = hf_config.task_type_vocab_size
        return fields


class ErnieEmbeddings(BertEmbeddings):
    def __init__(self, config: ErnieConfig) -> None:
        super().__init__(config)
        size = config.task_type_vocab_size
        self.task_type_embeddings = Embedding(size, config.hidden_size) if size else None

    def token_type_embedding(self, op, token_type_ids):
        types = super().token_type_embedding(op, token_type_ids)  # [batch, seq, hidden]
        if self.task_type_embeddings is None:
            return types
        # Task type 0's row joins the token types (transformers adds it last, before the
        # LayerNorm: the same sum to float rounding, and the LayerNorm keeps a full-rank skip).
        return op.Add(types, self.task_type_embeddings(op, op.Constant(value_int=0)))


class ErnieModel(BertModel):
    embeddings_class = ErnieEmbeddings


class ErnieForFeatureExtraction(BertForFeatureExtraction):
    """BERT's heads on the ERNIE encoder (``ernie.*``, ``cls.*``, ``classifier``)."""

    config_class = ErnieConfig
    base_model_prefix = "ernie"
    model_class = ErnieModel


class ErnieDecoderConfig(DecoderConfig, ErnieConfig):
    pass


class ErnieForCausalLM(EncoderAsCausalLM, ErnieForFeatureExtraction):
    config_class = ErnieDecoderConfig
    lm_head_name = "cls"


MODEL_TYPES = {"ernie": ErnieForFeatureExtraction, "ErnieForCausalLM": ErnieForCausalLM}
