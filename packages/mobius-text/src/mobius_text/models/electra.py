"""ELECTRA: BERT's encoder behind ``embedding_size`` embeddings, with generator and classifier heads.

Embeddings narrower than the encoder are widened by ``embeddings_project``. The
masked-LM head is the generator's (``generator_predictions``, then
``generator_lm_head``, tied to the word embeddings unless untied); sequence
classification is ``classifier.dense`` and ``classifier.out_proj`` on the first
token, with GELU between. The module tree follows ``ElectraFor*`` checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from onnxscript import nn

from mobius.components import Embedding, LayerNorm, Linear, get_activation, padding_bias
from mobius.errors import ConfigError
from mobius_text.models.bert import BertConfig, BertEmbeddings, BertEncoder


@dataclass
class ElectraConfig(BertConfig):
    embedding_size: int = 128

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if getattr(hf_config, "is_decoder", False):
            raise ConfigError("is_decoder=True makes ELECTRA causal; only the encoder is built")
        fields = super().hf_fields(hf_config)
        fields.update(embedding_size=hf_config.embedding_size)
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


class TiedLinear(nn.Module):
    """``x @ embeddings.T + bias``: a tied output projection whose bias alone is its own."""

    def __init__(self, embeddings: Embedding, out_features: int) -> None:
        super().__init__()
        self.bias = nn.Parameter([out_features])
        object.__setattr__(self, "embeddings", embeddings)  # owned by the encoder's embeddings

    def forward(self, op, x):
        table = op.Transpose(self.embeddings.weight, perm=[1, 0])  # [embedding, vocab]
        return op.Add(op.MatMul(x, table), self.bias)


class ElectraClassificationHead(nn.Module):
    """``out_proj(gelu(dense(x[:, 0])))``: GELU where BERT's pooler has tanh."""

    def __init__(self, config: ElectraConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size, bias=True)
        self.act = get_activation("gelu")
        self.out_proj = Linear(config.hidden_size, config.num_labels, bias=True)

    def forward(self, op, x):
        first = op.Gather(x, op.Constant(value_int=0), axis=1)  # [batch, hidden]
        return self.out_proj(op, self.act(op, self.dense(op, first)))


class ElectraForFeatureExtraction(nn.Module):
    """The encoder and the head its config names (see :class:`mobius.config.EncoderConfig`)."""

    config_class = ElectraConfig
    task = "feature-extraction"
    uses_token_type_ids = True
    base_model_prefix = "electra"
    model_class = ElectraModel  # ConvBERT sets its own parts
    classification_head_class = ElectraClassificationHead

    def __init__(self, config: ElectraConfig) -> None:
        super().__init__()
        self.config = config
        self.uses_token_type_ids = config.type_vocab_size > 0
        setattr(self, self.base_model_prefix, self.model_class(config))
        self.generator_predictions = self.generator_lm_head = self.classifier = None
        if config.head == "masked-lm":
            self.generator_predictions = ElectraGeneratorPredictions(config)
            self.generator_lm_head = (
                TiedLinear(self.base_model.embeddings.word_embeddings, config.vocab_size)
                if config.tie_word_embeddings
                else Linear(config.embedding_size, config.vocab_size, bias=True)
            )
        elif config.head == "sequence-classification":
            self.classifier = self.classification_head_class(config)
        elif config.head == "token-classification":
            self.classifier = Linear(config.hidden_size, config.num_labels, bias=True)

    @property
    def base_model(self) -> ElectraModel:
        return getattr(self, self.base_model_prefix)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        hidden = self.base_model(op, input_ids, attention_mask, token_type_ids)
        outputs = {"last_hidden_state": hidden}
        if self.generator_lm_head is not None:
            outputs["logits"] = self.generator_lm_head(op, self.generator_predictions(op, hidden))
        elif self.classifier is not None:
            outputs["logits"] = self.classifier(op, hidden)
        return outputs

    @property
    def ignored_weights(self) -> tuple[str, ...]:
        """Checkpoint tensors no graph of this head reads (other heads, position buffers)."""
        prefix = self.base_model_prefix
        ignored = [f"{prefix}.embeddings.position_ids", f"{prefix}.embeddings.token_type_ids"]
        ignored.append("discriminator_predictions.*")  # replaced-token detection (pre-training)
        if self.generator_lm_head is None:
            ignored += ["generator_predictions.*", "generator_lm_head.*"]
        if self.classifier is None:
            ignored.append("classifier.*")
        return tuple(ignored)

    def preprocess_weights(self, weights: dict) -> dict:
        """A bare base-model checkpoint gets the prefix; a tied head's copy of the embeddings goes."""
        prefix = f"{self.base_model_prefix}."
        heads = (prefix, "generator_", "discriminator_", "classifier.")
        weights = {k if k.startswith(heads) else prefix + k: v for k, v in weights.items()}
        if self.config.tie_word_embeddings:
            weights.pop("generator_lm_head.weight", None)
        return weights


MODEL_TYPES = {"electra": ElectraForFeatureExtraction}
