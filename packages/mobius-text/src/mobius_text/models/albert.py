"""ALBERT: factorised embeddings and layer groups whose weights every layer of a group shares.

Embeddings are ``embedding_size`` wide and mapped up to ``hidden_size`` by
``encoder.embedding_hidden_mapping_in``. The ``num_hidden_layers`` layers run
through ``num_hidden_groups`` groups of ``inner_group_num`` layers each: layer
``i`` reuses group ``i * groups // layers``, so the graph holds one copy of each
group's weights however deep the model is. The module tree follows
``AlbertFor*`` checkpoints (``albert.*``, ``predictions.*``, ``classifier``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear, get_activation, padding_bias
from mobius.config import EncoderConfig
from mobius_text.models._bert_common import (
    POOLED_HEADS,
    DenseLMHead,
    EncoderForFeatureExtraction,
    first_token,
)
from mobius_text.models.bert import BertEmbeddings, BertSelfAttention


@dataclass
class AlbertConfig(EncoderConfig):
    embedding_size: int = 128
    num_hidden_groups: int = 1
    inner_group_num: int = 1

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        fields.update(
            embedding_size=hf_config.embedding_size,
            num_hidden_groups=hf_config.num_hidden_groups,
            inner_group_num=hf_config.inner_group_num,
        )
        return fields


class AlbertAttention(BertSelfAttention):
    """BERT's self-attention and its post-norm residual in one module, as ALBERT names them."""

    def __init__(self, config: AlbertConfig) -> None:
        super().__init__(config.hidden_size, config.num_attention_heads)
        self.dense = Linear(config.hidden_size, config.hidden_size, bias=True)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, x, bias):
        attended = super().forward(op, x, bias)
        return self.LayerNorm(op, op.Add(x, self.dense(op, attended)))


class AlbertLayer(nn.Module):
    def __init__(self, config: AlbertConfig) -> None:
        super().__init__()
        self.attention = AlbertAttention(config)
        self.ffn = Linear(config.hidden_size, config.intermediate_size, bias=True)
        self.act = get_activation(config.hidden_act)
        self.ffn_output = Linear(config.intermediate_size, config.hidden_size, bias=True)
        self.full_layer_layer_norm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, x, bias):
        x = self.attention(op, x, bias)
        ffn = self.ffn_output(op, self.act(op, self.ffn(op, x)))
        return self.full_layer_layer_norm(op, op.Add(ffn, x))


class AlbertLayerGroup(nn.Module):
    def __init__(self, config: AlbertConfig) -> None:
        super().__init__()
        self.albert_layers = nn.ModuleList(
            [AlbertLayer(config) for _ in range(config.inner_group_num)]
        )

    def forward(self, op, x, bias):
        for layer in self.albert_layers:
            x = layer(op, x, bias)
        return x


class AlbertTransformer(nn.Module):
    def __init__(self, config: AlbertConfig) -> None:
        super().__init__()
        self.embedding_hidden_mapping_in = Linear(
            config.embedding_size, config.hidden_size, bias=True
        )
        self.albert_layer_groups = nn.ModuleList(
            [AlbertLayerGroup(config) for _ in range(config.num_hidden_groups)]
        )
        self.num_layers, self.num_groups = config.num_hidden_layers, config.num_hidden_groups

    def forward(self, op, x, bias):
        x = self.embedding_hidden_mapping_in(op, x)  # [batch, seq, embedding] -> hidden
        for i in range(self.num_layers):
            group = int(i / (self.num_layers / self.num_groups))  # as transformers rounds it
            x = self.albert_layer_groups[group](op, x, bias)
        return x


class AlbertModel(nn.Module):
    def __init__(self, config: AlbertConfig) -> None:
        super().__init__()
        # BERT's embeddings, ``embedding_size`` wide
        self.embeddings = BertEmbeddings(replace(config, hidden_size=config.embedding_size))
        self.encoder = AlbertTransformer(config)
        uses_pooler = config.head in POOLED_HEADS
        self.pooler = Linear(config.hidden_size, config.hidden_size, True) if uses_pooler else None

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        """``(last_hidden_state, tanh(pooler(x[:, 0])) or None)``."""
        x = self.embeddings(op, input_ids, token_type_ids)
        x = self.encoder(op, x, padding_bias(op, attention_mask, x.dtype))
        if self.pooler is None:
            return x, None
        return x, op.Tanh(self.pooler(op, first_token(op, x)))


class AlbertForFeatureExtraction(EncoderForFeatureExtraction):
    """The encoder and the head its config names (see :class:`mobius.config.EncoderConfig`).

    masked-lm: ``predictions``, ``dense`` down to ``embedding_size``, the activation,
    ``LayerNorm``, then the decoder (tied: the word embeddings plus ``bias``).
    """

    config_class = AlbertConfig
    uses_token_type_ids = True
    base_model_prefix = "albert"
    model_class = AlbertModel
    head_names = ("predictions", "classifier", "qa_outputs")
    pretraining_heads = ("sop_classifier",)  # sentence-order prediction
    optional_parts = ("pooler",)
    unread = ("embeddings.position_ids", "embeddings.token_type_ids")
    tied_copies = ("predictions.decoder.weight", "predictions.decoder.bias")
    untied_unused = ("predictions.bias",)

    def __init__(self, config: AlbertConfig) -> None:
        super().__init__(config)
        self.uses_token_type_ids = config.type_vocab_size > 0
        if config.head == "masked-lm":
            embeddings, tied = self.albert.embeddings.word_embeddings, config.tie_word_embeddings
            self.predictions = DenseLMHead(config, config.embedding_size, embeddings, tied)
        elif config.head in ("sequence-classification", "token-classification"):
            self.classifier = Linear(config.hidden_size, config.num_labels, bias=True)
        elif config.head == "multiple-choice":  # one score per pooled choice
            self.classifier = Linear(config.hidden_size, 1, bias=True)
        elif config.head == "question-answering":
            self.qa_outputs = Linear(config.hidden_size, config.num_labels, bias=True)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        hidden, pooled = self.albert(op, input_ids, attention_mask, token_type_ids)
        outputs = {"last_hidden_state": hidden}
        if self.predictions is not None:
            outputs["logits"] = self.predictions(op, hidden)
        elif self.classifier is not None:  # sequence level: on the pooled first token
            outputs["logits"] = self.classifier(op, hidden if pooled is None else pooled)
        elif self.qa_outputs is not None:
            outputs["logits"] = self.qa_outputs(op, hidden)
        return outputs


MODEL_TYPES = {"albert": AlbertForFeatureExtraction}
