"""ELECTRA: BERT's encoder behind ``embedding_size`` embeddings, with generator and classifier heads.

Embeddings narrower than the encoder are widened by ``embeddings_project``. The
masked-LM head is the generator's (``generator_predictions``, then
``generator_lm_head``, tied to the word embeddings unless untied); sequence
classification is ``classifier.dense`` and ``classifier.out_proj`` on the first
token, with GELU between; multiple choice is a ``sequence_summary`` (the config's
``summary_*`` fields, read as transformers reads them: absent, the last state, no
projection, no activation) and a one-score ``classifier``. The module tree follows
``ElectraFor*`` checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear, get_activation, padding_bias
from mobius.errors import ConfigError
from mobius_text.models._bert_common import (
    ClassificationHead,
    DecoderConfig,
    EncoderAsCausalLM,
    EncoderForFeatureExtraction,
    SequenceSummary,
    VocabProjection,
    summary_fields,
)
from mobius_text.models.bert import BertConfig, BertEmbeddings, BertEncoder


@dataclass
class ElectraConfig(BertConfig):
    embedding_size: int = 128
    #: the multiple-choice head's sequence summary: which state, its projection, activation
    summary_type: str = "last"
    summary_width: int | None = None
    summary_activation: str | None = None

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if getattr(hf_config, "is_decoder", False) and not issubclass(cls, DecoderConfig):
            raise ConfigError(
                "is_decoder=True makes ELECTRA causal: its checkpoint's class is ElectraForCausalLM"
            )
        fields = super().hf_fields(hf_config)
        fields.update(embedding_size=hf_config.embedding_size, **summary_fields(hf_config))
        return fields


class ElectraModel(nn.Module):
    encoder_class = BertEncoder  # ConvBERT sets its own

    def __init__(self, config: ElectraConfig) -> None:
        super().__init__()
        # BERT's embeddings, ``embedding_size`` wide
        self.embeddings = BertEmbeddings(replace(config, hidden_size=config.embedding_size))
        self.embeddings_project = None
        if config.embedding_size != config.hidden_size:
            self.embeddings_project = Linear(config.embedding_size, config.hidden_size, True)
        self.encoder = self.encoder_class(config)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        x = self.embeddings(op, input_ids, token_type_ids)  # [batch, seq, embedding]
        if self.embeddings_project is not None:
            x = self.embeddings_project(op, x)  # [batch, seq, hidden]
        return self.encoder(op, x, padding_bias(op, attention_mask, x.dtype))


class ElectraGeneratorPredictions(nn.Module):
    """``LayerNorm(gelu(dense(x)))``, down to ``embedding_size``."""

    def __init__(self, config: ElectraConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.embedding_size, bias=True)
        self.LayerNorm = LayerNorm(config.embedding_size, config.layer_norm_eps)

    def forward(self, op, x):
        return self.LayerNorm(op, get_activation("gelu")(op, self.dense(op, x)))


class ElectraForFeatureExtraction(EncoderForFeatureExtraction):
    """The encoder and the head its config names (see :class:`mobius.config.EncoderConfig`)."""

    config_class = ElectraConfig
    uses_token_type_ids = True
    base_model_prefix = "electra"
    model_class = ElectraModel  # ConvBERT sets its own parts
    head_names = (
        "generator_predictions",
        "generator_lm_head",
        "sequence_summary",
        "classifier",
        "qa_outputs",
    )
    pretraining_heads = ("discriminator_predictions",)  # replaced-token detection
    unread = ("embeddings.position_ids", "embeddings.token_type_ids")
    tied_copies = ("generator_lm_head.weight",)

    def __init__(self, config: ElectraConfig) -> None:
        super().__init__(config)
        self.uses_token_type_ids = config.type_vocab_size > 0
        if config.head == "masked-lm":
            self.generator_predictions = ElectraGeneratorPredictions(config)
            embeddings = self.base_model.embeddings.word_embeddings
            self.generator_lm_head = VocabProjection(
                config.embedding_size, config.vocab_size, embeddings, config.tie_word_embeddings
            )
        elif config.head == "sequence-classification":
            self.classifier = self.sequence_classifier(config)
        elif config.head == "multiple-choice":
            kind, act = config.summary_type, config.summary_activation
            hidden, width = config.hidden_size, config.summary_width
            self.sequence_summary = SequenceSummary(hidden, width, act, kind)
            self.classifier = Linear(width or hidden, 1, bias=True)
        elif config.head == "token-classification":
            self.classifier = Linear(config.hidden_size, config.num_labels, bias=True)
        elif config.head == "question-answering":
            self.qa_outputs = Linear(config.hidden_size, config.num_labels, bias=True)

    def sequence_classifier(self, config: ElectraConfig) -> nn.Module:
        """``classifier``: GELU where BERT's pooler has tanh (ConvBERT: the config's activation)."""
        return ClassificationHead(config.hidden_size, config.num_labels, "gelu")

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        hidden = self.base_model(op, input_ids, attention_mask, token_type_ids)
        outputs = {"last_hidden_state": hidden}
        if self.generator_lm_head is not None:
            outputs["logits"] = self.generator_lm_head(op, self.generator_predictions(op, hidden))
        elif self.classifier is not None:
            summary = self.sequence_summary
            state = hidden if summary is None else summary(op, hidden)
            outputs["logits"] = self.classifier(op, state)
        elif self.qa_outputs is not None:
            outputs["logits"] = self.qa_outputs(op, hidden)
        return outputs


class ElectraDecoderConfig(DecoderConfig, ElectraConfig):
    pass


class ElectraForCausalLM(EncoderAsCausalLM, ElectraForFeatureExtraction):
    """ELECTRA as a causal LM: the generator's head on the causal encoder."""

    config_class = ElectraDecoderConfig

    def embed(self, op, input_ids, position_ids):
        x = super().embed(op, input_ids, position_ids)
        project = self.base_model.embeddings_project
        return x if project is None else project(op, x)

    def logits(self, op, x):
        return self.generator_lm_head(op, self.generator_predictions(op, x))


MODEL_TYPES = {"electra": ElectraForFeatureExtraction, "ElectraForCausalLM": ElectraForCausalLM}
