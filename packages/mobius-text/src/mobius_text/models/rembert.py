"""RemBERT: BERT's encoder with decoupled input and output embeddings.

Inputs are embedded ``input_embedding_size`` wide and widened by
``encoder.embedding_hidden_mapping_in``; the masked-LM head projects down to its
own ``output_embedding_size`` and has its own decoder (never tied to the inputs).
The module tree follows ``RemBertFor*`` checkpoints (``rembert.*``, ``cls.*``,
``classifier``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear, get_activation, padding_bias
from mobius.errors import ConfigError
from mobius_text.models.bert import BertConfig, BertEmbeddings, BertEncoder, BertPooler


@dataclass
class RemBertConfig(BertConfig):
    input_embedding_size: int = 256
    output_embedding_size: int = 1664

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if getattr(hf_config, "is_decoder", False):
            raise ConfigError("is_decoder=True makes RemBERT causal; only the encoder is built")
        fields = super().hf_fields(hf_config)
        fields.update(
            input_embedding_size=hf_config.input_embedding_size,
            output_embedding_size=hf_config.output_embedding_size,
        )
        return fields


class RemBertEncoder(BertEncoder):
    def __init__(self, config: RemBertConfig) -> None:
        super().__init__(config)
        self.embedding_hidden_mapping_in = Linear(
            config.input_embedding_size, config.hidden_size, bias=True
        )

    def forward(self, op, x, bias):
        return super().forward(op, self.embedding_hidden_mapping_in(op, x), bias)


class RemBertModel(nn.Module):
    def __init__(self, config: RemBertConfig) -> None:
        super().__init__()
        # BERT's embeddings, ``input_embedding_size`` wide
        self.embeddings = BertEmbeddings(replace(config, hidden_size=config.input_embedding_size))
        self.encoder = RemBertEncoder(config)
        uses_pooler = config.head == "sequence-classification"
        self.pooler = BertPooler(config.hidden_size) if uses_pooler else None

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        """``(last_hidden_state, pooled or None)``."""
        x = self.embeddings(op, input_ids, token_type_ids)  # [batch, seq, input_embedding]
        x = self.encoder(op, x, padding_bias(op, attention_mask, x.dtype))
        return x, self.pooler(op, x) if self.pooler is not None else None


class RemBertLMPredictionHead(nn.Module):
    """``decoder(LayerNorm(act(dense(x))))`` through ``output_embedding_size``."""

    def __init__(self, config: RemBertConfig) -> None:
        super().__init__()
        width = config.output_embedding_size
        self.dense = Linear(config.hidden_size, width, bias=True)
        self.act = get_activation(config.hidden_act)
        self.LayerNorm = LayerNorm(width, config.layer_norm_eps)
        self.decoder = Linear(width, config.vocab_size, bias=True)

    def forward(self, op, x):
        return self.decoder(op, self.LayerNorm(op, self.act(op, self.dense(op, x))))


class RemBertOnlyMLMHead(nn.Module):
    def __init__(self, config: RemBertConfig) -> None:
        super().__init__()
        self.predictions = RemBertLMPredictionHead(config)

    def forward(self, op, x):
        return self.predictions(op, x)


class RemBertForFeatureExtraction(nn.Module):
    """The encoder and the head its config names (see :class:`mobius.config.EncoderConfig`)."""

    config_class = RemBertConfig
    task = "feature-extraction"
    uses_token_type_ids = True

    def __init__(self, config: RemBertConfig) -> None:
        super().__init__()
        self.config = config
        self.uses_token_type_ids = config.type_vocab_size > 0
        self.rembert = RemBertModel(config)
        self.cls = self.classifier = None
        if config.head == "masked-lm":
            self.cls = RemBertOnlyMLMHead(config)
        elif config.head in ("sequence-classification", "token-classification"):
            self.classifier = Linear(config.hidden_size, config.num_labels, bias=True)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        hidden, pooled = self.rembert(op, input_ids, attention_mask, token_type_ids)
        outputs = {"last_hidden_state": hidden}
        if self.cls is not None:
            outputs["logits"] = self.cls(op, hidden)
        elif self.classifier is not None:  # sequence level: on the pooled first token
            outputs["logits"] = self.classifier(op, hidden if pooled is None else pooled)
        return outputs

    @property
    def ignored_weights(self) -> tuple[str, ...]:
        """Checkpoint tensors no graph of this head reads (other heads, position buffers)."""
        ignored = ["rembert.embeddings.position_ids"]
        if self.rembert.pooler is None:
            ignored.append("rembert.pooler.*")
        if self.cls is None:
            ignored.append("cls.predictions.*")
        if self.classifier is None:
            ignored.append("classifier.*")
        return tuple(ignored)

    def preprocess_weights(self, weights: dict) -> dict:
        """A bare ``RemBertModel`` checkpoint gets the ``rembert.`` prefix."""
        heads = ("rembert.", "cls.", "classifier.")
        return {k if k.startswith(heads) else f"rembert.{k}": v for k, v in weights.items()}


MODEL_TYPES = {"rembert": RemBertForFeatureExtraction}
