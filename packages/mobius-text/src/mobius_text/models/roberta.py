"""RoBERTa (and XLM-RoBERTa, CamemBERT): BERT's layers with positions that skip padding.

Positions count from ``pad_token_id + 1`` over the non-pad tokens (fairseq's
``make_positions``); the heads are ``lm_head`` (dense, GELU, LayerNorm, decoder tied
to the word embeddings), ``classifier`` (dense, tanh, ``out_proj`` on the first token;
for multiple choice, one score on BERT's pooler) and ``qa_outputs``. The module tree
follows ``RobertaFor*`` checkpoints (``roberta.*``, ``lm_head.*``, ``classifier.*``); a bare
``RobertaModel`` checkpoint gets the ``roberta.`` prefix added. The variants of the
lineage (data2vec-text, pre-LayerNorm, XL, I-BERT, X-MOD) subclass these classes.
``RobertaForCausalLM`` (``is_decoder=True``) is the masked-LM tree as a causal LM; it
reads positions at ``position_ids``, as transformers does when ``generate`` feeds them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    LayerNorm,
    Linear,
    get_activation,
    module_scope,
    padding_bias,
)
from mobius.errors import ConfigError
from mobius_text.models._bert_common import (
    ClassificationHead,
    DecoderConfig,
    EncoderAsCausalLM,
    EncoderForFeatureExtraction,
    MaskedLMHead,
)
from mobius_text.models.bert import BertConfig, BertEmbeddings, BertEncoder, BertPooler


@dataclass
class RobertaConfig(BertConfig):
    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if getattr(hf_config, "is_decoder", False) and not issubclass(cls, DecoderConfig):
            raise ConfigError(
                "is_decoder=True is a causal LM: its checkpoint's class is RobertaForCausalLM"
            )
        fields = super().hf_fields(hf_config)
        if fields["pad_token_id"] is None:
            raise ConfigError("RoBERTa positions count from pad_token_id + 1; the config has none")
        return fields


def padding_aware_position_ids(op, input_ids, padding_idx: int):
    """``[batch, seq]``: ``padding_idx + 1, + 2...`` over the non-pad tokens; pads get ``padding_idx``."""
    pad = op.Constant(value=ir.tensor(padding_idx, dtype=ir.DataType.INT64))
    real = op.Cast(op.Not(op.Equal(input_ids, pad)), to=ir.DataType.INT64)  # [batch, seq]
    counts = op.CumSum(real, op.Constant(value_int=1))  # 1, 2, 3... along the sequence
    return op.Add(op.Mul(counts, real), pad)


class RobertaEmbeddings(BertEmbeddings):
    def __init__(self, config: RobertaConfig) -> None:
        super().__init__(config)
        self.padding_idx = config.pad_token_id

    def position_ids(self, op, input_ids):
        return padding_aware_position_ids(op, input_ids, self.padding_idx)


def choice_pooler(config) -> BertPooler | None:
    """BERT's pooler, which only the multiple-choice head of RoBERTa's lineage reads."""
    return BertPooler(config.hidden_size) if config.head == "multiple-choice" else None


class RobertaModel(nn.Module):
    """Embeddings, encoder, and the pooler only multiple choice reads (the other heads read
    the first token themselves); :class:`RobertaForFeatureExtraction` runs the pooler."""

    embeddings_class = RobertaEmbeddings  # variants set their own parts
    encoder_class = BertEncoder

    def __init__(self, config: RobertaConfig) -> None:
        super().__init__()
        self.embeddings = self.embeddings_class(config)
        self.encoder = self.encoder_class(config)
        self.pooler = choice_pooler(config)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        x = self.embeddings(op, input_ids, token_type_ids)  # [batch, seq, hidden]
        return self.encoder(op, x, padding_bias(op, attention_mask, x.dtype))


class RobertaLMHead(MaskedLMHead):
    """``decoder(layer_norm(gelu(dense(x))))``: exact GELU whatever ``hidden_act`` says."""

    def __init__(self, config: RobertaConfig, embeddings: Embedding) -> None:
        hidden = config.hidden_size
        super().__init__(hidden, config.vocab_size, embeddings, config.tie_word_embeddings)
        self.dense = Linear(hidden, hidden, bias=True)
        self.act = get_activation("gelu")
        self.layer_norm = LayerNorm(hidden, config.layer_norm_eps)

    def forward(self, op, x):
        return self.decode(op, self.layer_norm(op, self.act(op, self.dense(op, x))))


class RobertaForFeatureExtraction(EncoderForFeatureExtraction):
    """The encoder and the head its config names (see :class:`mobius.config.EncoderConfig`)."""

    config_class = RobertaConfig
    uses_token_type_ids = True
    base_model_prefix = "roberta"  # the encoder's attribute and checkpoint prefix
    model_class = RobertaModel
    head_names = ("lm_head", "classifier", "qa_outputs")
    optional_parts = ("pooler",)
    unread = ("embeddings.position_ids", "embeddings.token_type_ids")
    tied_copies = ("lm_head.decoder.weight", "lm_head.decoder.bias")
    untied_unused = ("lm_head.bias",)

    def __init__(self, config: RobertaConfig) -> None:
        super().__init__(config)
        # RoBERTa checkpoints have one token type and their tokenizers give no token_type_ids:
        # the graph takes them only where the config has more than one.
        self.uses_token_type_ids = config.type_vocab_size > 1
        hidden, labels = config.hidden_size, config.num_labels
        if config.head == "masked-lm":
            self.lm_head = RobertaLMHead(config, self.base_model.embeddings.word_embeddings)
        elif config.head == "sequence-classification":
            self.classifier = ClassificationHead(hidden, labels, "tanh")
        elif config.head == "multiple-choice":
            self.classifier = Linear(hidden, 1, bias=True)
        elif config.head == "token-classification":
            self.classifier = Linear(hidden, labels, bias=True)
        elif config.head == "question-answering":
            self.qa_outputs = Linear(hidden, labels, bias=True)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        hidden = self.base_model(op, input_ids, attention_mask, token_type_ids)
        outputs = {"last_hidden_state": hidden}
        heads = (self.lm_head, self.classifier, self.qa_outputs)
        head = next((h for h in heads if h is not None), None)
        if self.base_model.pooler is not None:  # multiple choice: one score per pooled row
            with module_scope(op, self.base_model):  # its weights stay <prefix>.pooler
                hidden = self.base_model.pooler(op, hidden)
        if head is not None:
            outputs["logits"] = head(op, hidden)
        return outputs


@dataclass
class RobertaDecoderConfig(DecoderConfig, RobertaConfig):
    pass


class RobertaForCausalLM(EncoderAsCausalLM, RobertaForFeatureExtraction):
    """RoBERTa as a causal LM: causal self-attention over a KV cache, ``lm_head`` as the LM head."""

    config_class = RobertaDecoderConfig


# XLM-RoBERTa and CamemBERT are RoBERTa with another vocabulary (transformers copies the code).
MODEL_TYPES = {
    "roberta": RobertaForFeatureExtraction,
    "xlm-roberta": RobertaForFeatureExtraction,
    "camembert": RobertaForFeatureExtraction,
    "RobertaForCausalLM": RobertaForCausalLM,
    "XLMRobertaForCausalLM": RobertaForCausalLM,
    "CamembertForCausalLM": RobertaForCausalLM,
}
