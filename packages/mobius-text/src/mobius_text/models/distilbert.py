"""DistilBERT: BERT's post-norm layers without token types or pooler, under its own names.

The module tree follows ``DistilBertFor*`` checkpoints (``distilbert.*``,
``vocab_*``, ``pre_classifier``, ``classifier``); a bare ``DistilBertModel``
checkpoint gets the ``distilbert.`` prefix added. Sinusoidal position embeddings
(``sinusoidal_pos_embds``) are stored in the checkpoint like learned ones, so they
change nothing here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Embedding, LayerNorm, Linear, get_activation, padding_bias
from mobius.config import EncoderConfig
from mobius_text.models._bert_common import (
    EncoderForFeatureExtraction,
    VocabProjection,
    first_token,
)
from mobius_text.models.bert import BertEncoder
from mobius_text.models.xlm import MultiHeadAttention, TransformerFFN  # DistilBERT's, the same

# DistilBERT's LayerNorms have a fixed epsilon; the config has no field for it.
LAYER_NORM_EPS = 1e-12


@dataclass
class DistilBertConfig(EncoderConfig):
    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        fields.update(
            intermediate_size=hf_config.hidden_dim,  # ``dim``/``hidden_dim``: model and FFN widths
            hidden_act=hf_config.activation,
            layer_norm_eps=LAYER_NORM_EPS,
            type_vocab_size=0,
        )
        return fields


class DistilBertEmbeddings(nn.Module):
    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__()
        self.word_embeddings = Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = Embedding(config.max_position_embeddings, config.hidden_size)
        self.LayerNorm = LayerNorm(config.hidden_size, LAYER_NORM_EPS)

    def forward(self, op, input_ids):
        seq_len = op.Squeeze(op.Shape(input_ids, start=1, end=2), [0])
        positions = op.Unsqueeze(op.Range(0, seq_len, 1), [0])  # [1, seq]: padding sits at the end
        x = op.Add(self.word_embeddings(op, input_ids), self.position_embeddings(op, positions))
        return self.LayerNorm(op, x)


class TransformerBlock(nn.Module):
    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__()
        dim = config.hidden_size
        self.attention = MultiHeadAttention(dim, config.num_attention_heads)
        self.sa_layer_norm = LayerNorm(dim, LAYER_NORM_EPS)
        self.ffn = TransformerFFN(dim, config.intermediate_size, config.hidden_act)
        self.output_layer_norm = LayerNorm(dim, LAYER_NORM_EPS)

    def forward(self, op, x, bias):
        x = self.sa_layer_norm(op, op.Add(self.attention(op, x, bias), x))  # post-norm
        return self.output_layer_norm(op, op.Add(self.ffn(op, x), x))


class Transformer(BertEncoder):
    layer_class = TransformerBlock


class DistilBertModel(nn.Module):
    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__()
        self.embeddings = DistilBertEmbeddings(config)
        self.transformer = Transformer(config)

    def forward(self, op, input_ids, attention_mask):
        x = self.embeddings(op, input_ids)  # [batch, seq, dim]
        return self.transformer(op, x, padding_bias(op, attention_mask, x.dtype))


class DistilBertForFeatureExtraction(EncoderForFeatureExtraction):
    """The encoder and the head its config names (see :class:`mobius.config.EncoderConfig`).

    masked-lm: ``vocab_transform`` (activation, ``vocab_layer_norm``) then
    ``vocab_projector``, whose weight is the word embeddings unless untied;
    sequence classification: ``relu(pre_classifier(x[:, 0]))`` then ``classifier``, as
    multiple choice with one score per choice; question answering: ``qa_outputs``.
    """

    config_class = DistilBertConfig
    uses_token_type_ids = False
    base_model_prefix = "distilbert"
    model_class = DistilBertModel
    head_names = (
        "vocab_transform",
        "vocab_layer_norm",
        "vocab_projector",
        "pre_classifier",
        "classifier",
        "qa_outputs",
    )
    unread = ("embeddings.position_ids",)
    tied_copies = ("vocab_projector.weight",)

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__(config)
        dim, head = config.hidden_size, config.head
        if head == "masked-lm":
            self.vocab_transform = Linear(dim, dim, bias=True)
            self.act = get_activation(config.hidden_act)
            self.vocab_layer_norm = LayerNorm(dim, LAYER_NORM_EPS)
            embeddings = self.distilbert.embeddings.word_embeddings
            self.vocab_projector = VocabProjection(
                dim, config.vocab_size, embeddings, config.tie_word_embeddings
            )
        elif head in ("sequence-classification", "token-classification"):
            if head == "sequence-classification":
                self.pre_classifier = Linear(dim, dim, bias=True)
            self.classifier = Linear(dim, config.num_labels, bias=True)
        elif head == "multiple-choice":
            self.pre_classifier = Linear(dim, dim, bias=True)
            self.classifier = Linear(dim, 1, bias=True)
        elif head == "question-answering":
            self.qa_outputs = Linear(dim, config.num_labels, bias=True)

    def forward(self, op, input_ids, attention_mask, token_type_ids=None):
        hidden = self.distilbert(op, input_ids, attention_mask)
        outputs = {"last_hidden_state": hidden}
        if self.vocab_projector is not None:
            x = self.vocab_layer_norm(op, self.act(op, self.vocab_transform(op, hidden)))
            outputs["logits"] = self.vocab_projector(op, x)
        elif self.pre_classifier is not None:
            first = first_token(op, hidden)  # [batch, dim]
            outputs["logits"] = self.classifier(op, op.Relu(self.pre_classifier(op, first)))
        elif self.classifier is not None:
            outputs["logits"] = self.classifier(op, hidden)
        elif self.qa_outputs is not None:
            outputs["logits"] = self.qa_outputs(op, hidden)
        return outputs


MODEL_TYPES = {"distilbert": DistilBertForFeatureExtraction}
