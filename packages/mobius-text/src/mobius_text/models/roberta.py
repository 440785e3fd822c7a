"""RoBERTa (and XLM-RoBERTa, CamemBERT): BERT's layers with positions that skip padding.

Positions count from ``pad_token_id + 1`` over the non-pad tokens (fairseq's
``make_positions``); there is no pooler, and the heads are ``lm_head`` (dense, GELU,
LayerNorm, decoder tied to the word embeddings) and ``classifier`` (dense, tanh,
``out_proj`` on the first token). The module tree follows ``RobertaFor*``
checkpoints (``roberta.*``, ``lm_head.*``, ``classifier.*``); a bare
``RobertaModel`` checkpoint gets the ``roberta.`` prefix added. The variants of the
lineage (data2vec-text, pre-LayerNorm, XL, I-BERT, X-MOD) subclass these classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, LayerNorm, Linear, get_activation, padding_bias
from mobius.errors import ConfigError
from mobius_text.models.bert import BertConfig, BertEmbeddings, BertEncoder


@dataclass
class RobertaConfig(BertConfig):
    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if getattr(hf_config, "is_decoder", False):
            raise ConfigError("is_decoder=True is a causal LM; mobius builds RoBERTa as an encoder")
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


class ResidualDense(nn.Module):
    """``dense(x) + residual``: the un-normalised block output of pre-LayerNorm variants."""

    def __init__(self, in_features: int, hidden_size: int) -> None:
        super().__init__()
        self.dense = Linear(in_features, hidden_size, bias=True)

    def forward(self, op, x, residual):
        return op.Add(self.dense(op, x), residual)


class RobertaModel(nn.Module):
    """Embeddings and encoder (no pooler: RoBERTa's heads read the first token themselves)."""

    embeddings_class = RobertaEmbeddings  # variants set their own parts
    encoder_class = BertEncoder

    def __init__(self, config: RobertaConfig) -> None:
        super().__init__()
        self.embeddings = self.embeddings_class(config)
        self.encoder = self.encoder_class(config)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        x = self.embeddings(op, input_ids, token_type_ids)  # [batch, seq, hidden]
        return self.encoder(op, x, padding_bias(op, attention_mask, x.dtype))


class RobertaLMHead(nn.Module):
    """``decoder(LayerNorm(gelu(dense(x))))``: exact GELU whatever ``hidden_act`` says.

    Tied, the decoder is the word embeddings plus ``bias``; untied (``tie_word_embeddings
    =False``) the ``decoder`` Linear has its own weight and bias, and ``bias`` is unused.
    """

    def __init__(self, config: RobertaConfig, embeddings: Embedding) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size, bias=True)
        self.act = get_activation("gelu")
        self.layer_norm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        if config.tie_word_embeddings:
            self.bias, self.decoder = nn.Parameter([config.vocab_size]), None
        else:
            self.bias, self.decoder = None, Linear(config.hidden_size, config.vocab_size, True)
        object.__setattr__(self, "embeddings", embeddings)  # owned by <prefix>.embeddings

    def forward(self, op, x):
        x = self.layer_norm(op, self.act(op, self.dense(op, x)))
        if self.decoder is not None:
            return self.decoder(op, x)
        table = op.Transpose(self.embeddings.weight, perm=[1, 0])  # [hidden, vocab]
        return op.Add(op.MatMul(x, table), self.bias)


class RobertaClassificationHead(nn.Module):
    """``out_proj(tanh(dense(x[:, 0])))``: sequence classification on the first token (``<s>``)."""

    def __init__(self, hidden_size: int, num_labels: int) -> None:
        super().__init__()
        self.dense = Linear(hidden_size, hidden_size, bias=True)
        self.out_proj = Linear(hidden_size, num_labels, bias=True)

    def forward(self, op, x):
        first = op.Gather(x, op.Constant(value_int=0), axis=1)  # [batch, hidden]
        return self.out_proj(op, op.Tanh(self.dense(op, first)))


class RobertaForFeatureExtraction(nn.Module):
    """The encoder and the head its config names (see :class:`mobius.config.EncoderConfig`)."""

    config_class = RobertaConfig
    task = "feature-extraction"
    uses_token_type_ids = True
    base_model_prefix = "roberta"  # the encoder's attribute and checkpoint prefix
    model_class = RobertaModel

    def __init__(self, config: RobertaConfig) -> None:
        super().__init__()
        self.config = config
        # RoBERTa checkpoints have one token type and their tokenizers give no token_type_ids:
        # the graph takes them only where the config has more than one.
        self.uses_token_type_ids = config.type_vocab_size > 1
        setattr(self, self.base_model_prefix, self.model_class(config))
        self.lm_head = None
        self.classifier = None
        if config.head == "masked-lm":
            self.lm_head = RobertaLMHead(config, self.base_model.embeddings.word_embeddings)
        elif config.head == "sequence-classification":
            self.classifier = RobertaClassificationHead(config.hidden_size, config.num_labels)
        elif config.head == "token-classification":
            self.classifier = Linear(config.hidden_size, config.num_labels, bias=True)

    @property
    def base_model(self) -> RobertaModel:
        return getattr(self, self.base_model_prefix)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        hidden = self.base_model(op, input_ids, attention_mask, token_type_ids)
        outputs = {"last_hidden_state": hidden}
        head = self.lm_head if self.lm_head is not None else self.classifier
        if head is not None:
            outputs["logits"] = head(op, hidden)
        return outputs

    @property
    def ignored_weights(self) -> tuple[str, ...]:
        """Checkpoint tensors no graph of this head reads (the pooler, other heads, buffers)."""
        prefix = self.base_model_prefix
        ignored = [f"{prefix}.embeddings.position_ids", f"{prefix}.embeddings.token_type_ids"]
        ignored.append(f"{prefix}.pooler.*")  # a bare model's; no RoBERTa head reads it
        if self.lm_head is None:
            ignored.append("lm_head.*")
        if self.classifier is None:
            ignored.append("classifier.*")
        return tuple(ignored)

    def preprocess_weights(self, weights: dict) -> dict:
        """A bare model checkpoint gets the encoder's prefix; the tied decoder is dropped."""
        prefix = f"{self.base_model_prefix}."
        heads = (prefix, "lm_head.", "classifier.")
        weights = {k if k.startswith(heads) else prefix + k: v for k, v in weights.items()}
        if self.config.tie_word_embeddings:  # the word embeddings and lm_head.bias
            weights.pop("lm_head.decoder.weight", None)
            weights.pop("lm_head.decoder.bias", None)
        else:  # the decoder's own bias is the one used
            weights.pop("lm_head.bias", None)
        return weights


# XLM-RoBERTa and CamemBERT are RoBERTa with another vocabulary (transformers copies the code).
MODEL_TYPES = {
    "roberta": RobertaForFeatureExtraction,
    "xlm-roberta": RobertaForFeatureExtraction,
    "camembert": RobertaForFeatureExtraction,
}
