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

from mobius.components import (
    Embedding,
    LayerNorm,
    Linear,
    bidirectional_attention,
    get_activation,
    padding_bias,
)
from mobius.config import EncoderConfig
from mobius_text.models.bert import BertEmbeddings


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


class AlbertAttention(nn.Module):
    """Self-attention and its post-norm residual in one module, as ALBERT names them."""

    def __init__(self, config: AlbertConfig) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.query = Linear(hidden, hidden, bias=True)
        self.key = Linear(hidden, hidden, bias=True)
        self.value = Linear(hidden, hidden, bias=True)
        self.dense = Linear(hidden, hidden, bias=True)
        self.LayerNorm = LayerNorm(hidden, config.layer_norm_eps)
        self.num_heads, self.scale = config.num_attention_heads, config.head_dim**-0.5

    def forward(self, op, x, bias):
        q, k, v = self.query(op, x), self.key(op, x), self.value(op, x)
        attended = bidirectional_attention(op, q, k, v, bias, self.num_heads, self.scale)
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
        uses_pooler = config.head == "sequence-classification"
        self.pooler = Linear(config.hidden_size, config.hidden_size, True) if uses_pooler else None

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        """``(last_hidden_state, tanh(pooler(x[:, 0])) or None)``."""
        x = self.embeddings(op, input_ids, token_type_ids)
        x = self.encoder(op, x, padding_bias(op, attention_mask, x.dtype))
        if self.pooler is None:
            return x, None
        first = op.Gather(x, op.Constant(value_int=0), axis=1)  # [batch, hidden]
        return x, op.Tanh(self.pooler(op, first))


class AlbertMLMHead(nn.Module):
    """``dense`` down to ``embedding_size``, activation, ``LayerNorm``, then the vocabulary.

    Tied, the decoder is the word embeddings plus ``bias``; untied (as BERT), the
    ``decoder`` Linear has its own weight and bias and ``bias`` is left unused.
    """

    def __init__(self, config: AlbertConfig, embeddings: Embedding) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.embedding_size, bias=True)
        self.act = get_activation(config.hidden_act)
        self.LayerNorm = LayerNorm(config.embedding_size, config.layer_norm_eps)
        if config.tie_word_embeddings:
            self.bias, self.decoder = nn.Parameter([config.vocab_size]), None
        else:
            self.bias = None
            self.decoder = Linear(config.embedding_size, config.vocab_size, bias=True)
        object.__setattr__(self, "embeddings", embeddings)  # owned by albert.embeddings

    def forward(self, op, x):
        x = self.LayerNorm(op, self.act(op, self.dense(op, x)))  # [batch, seq, embedding]
        if self.decoder is not None:
            return self.decoder(op, x)
        table = op.Transpose(self.embeddings.weight, perm=[1, 0])  # [embedding, vocab]
        return op.Add(op.MatMul(x, table), self.bias)


class AlbertForFeatureExtraction(nn.Module):
    """The encoder and the head its config names (see :class:`mobius.config.EncoderConfig`)."""

    config_class = AlbertConfig
    task = "feature-extraction"
    uses_token_type_ids = True

    def __init__(self, config: AlbertConfig) -> None:
        super().__init__()
        self.config = config
        self.uses_token_type_ids = config.type_vocab_size > 0
        self.albert = AlbertModel(config)
        self.predictions = self.classifier = None
        if config.head == "masked-lm":
            self.predictions = AlbertMLMHead(config, self.albert.embeddings.word_embeddings)
        elif config.head in ("sequence-classification", "token-classification"):
            self.classifier = Linear(config.hidden_size, config.num_labels, bias=True)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        hidden, pooled = self.albert(op, input_ids, attention_mask, token_type_ids)
        outputs = {"last_hidden_state": hidden}
        if self.predictions is not None:
            outputs["logits"] = self.predictions(op, hidden)
        elif self.classifier is not None:  # sequence level: on the pooled first token
            outputs["logits"] = self.classifier(op, hidden if pooled is None else pooled)
        return outputs

    @property
    def ignored_weights(self) -> tuple[str, ...]:
        """Checkpoint tensors no graph of this head reads (other heads, position buffers)."""
        ignored = ["albert.embeddings.position_ids", "albert.embeddings.token_type_ids"]
        ignored.append("sop_classifier.*")  # sentence-order prediction (pre-training)
        if self.albert.pooler is None:
            ignored.append("albert.pooler.*")
        if self.predictions is None:
            ignored.append("predictions.*")
        if self.classifier is None:
            ignored.append("classifier.*")
        return tuple(ignored)

    def preprocess_weights(self, weights: dict) -> dict:
        """A bare ``AlbertModel`` checkpoint gets the ``albert.`` prefix; the tied decoder is dropped."""
        heads = ("albert.", "predictions.", "sop_classifier.", "classifier.")
        weights = {k if k.startswith(heads) else f"albert.{k}": v for k, v in weights.items()}
        if self.config.tie_word_embeddings:  # the word embeddings and predictions.bias
            weights.pop("predictions.decoder.weight", None)
            weights.pop("predictions.decoder.bias", None)
        else:  # the decoder's own bias is the one used
            weights.pop("predictions.bias", None)
        return weights


MODEL_TYPES = {"albert": AlbertForFeatureExtraction}
