"""RoFormer: BERT's post-norm layers with rotary positions on q and k (and v with ``rotary_value``).

What differs from BERT:

- no position embeddings; the encoder keeps a sinusoidal table
  ``encoder.embed_positions.weight [max_positions, head_dim]`` (sin in the first half,
  cos in the second) that rotates adjacent channel pairs of every head;
- embeddings may be narrower (``embedding_size``), then ``embeddings_project`` widens them,
  and the masked-LM transform narrows back to ``embedding_size`` before the tied decoder;
- sequence classification has no pooler: ``classifier.dense``, the activation, ``out_proj``
  on the first token.
"""

from __future__ import annotations

from dataclasses import dataclass
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
from mobius.errors import ConfigError
from mobius_text.models._encoder_rotary import rotate_heads, sequence_positions
from mobius_text.models.bert import BertIntermediate, BertResidualOutput


@dataclass
class RoFormerConfig(EncoderConfig):
    """Encoder fields plus the embedding width and whether values rotate too."""

    embedding_size: int = 0
    rotary_value: bool = False

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if getattr(hf_config, "is_decoder", False):
            raise ConfigError("a RoFormer decoder (is_decoder=True) is not an encoder; not built")
        fields = super().hf_fields(hf_config)
        embedding_size = getattr(hf_config, "embedding_size", None) or fields["hidden_size"]
        return {
            **fields,
            "embedding_size": int(embedding_size),
            "rotary_value": bool(hf_config.rotary_value),
        }


class RoFormerEmbeddings(nn.Module):
    def __init__(self, config: RoFormerConfig) -> None:
        super().__init__()
        width = config.embedding_size
        self.word_embeddings = Embedding(config.vocab_size, width)
        self.token_type_embeddings = Embedding(config.type_vocab_size, width)
        self.LayerNorm = LayerNorm(width, config.layer_norm_eps)

    def forward(self, op, input_ids, token_type_ids):
        x = op.Add(
            self.word_embeddings(op, input_ids), self.token_type_embeddings(op, token_type_ids)
        )
        return self.LayerNorm(op, x)  # [batch, seq, embedding_size]


class RoFormerSinusoidalPositions(nn.Module):
    """The checkpoint's ``[max_positions, head_dim]`` table: ``[sin | cos]`` of each position."""

    def __init__(self, max_positions: int, head_dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([max_positions, head_dim])
        self.half = head_dim // 2

    def forward(self, op, position_ids):
        """``(cos, sin, head_dim)`` for :func:`rotate_heads`, each table ``[batch, seq, head_dim/2]``."""
        table = op.Gather(self.weight, position_ids, axis=0)  # [batch, seq, head_dim]
        sin, cos = op.Split(table, num_outputs=2, axis=-1, _outputs=2)
        return cos, sin, 2 * self.half


class RoFormerSelfAttention(nn.Module):
    def __init__(self, config: RoFormerConfig) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.query = Linear(hidden, hidden, bias=True)
        self.key = Linear(hidden, hidden, bias=True)
        self.value = Linear(hidden, hidden, bias=True)
        self.num_heads, self.scale = config.num_attention_heads, config.head_dim**-0.5
        self.rotary_value = config.rotary_value

    def forward(self, op, x, rotary, bias):
        rotate = lambda t: rotate_heads(op, t, rotary, self.num_heads, interleaved=True)  # noqa: E731
        q, k, v = rotate(self.query(op, x)), rotate(self.key(op, x)), self.value(op, x)
        if self.rotary_value:
            v = rotate(v)
        return bidirectional_attention(op, q, k, v, bias, self.num_heads, self.scale)


class RoFormerAttention(nn.Module):
    def __init__(self, config: RoFormerConfig) -> None:
        super().__init__()
        self.self = RoFormerSelfAttention(config)
        hidden = config.hidden_size
        self.output = BertResidualOutput(hidden, hidden, config.layer_norm_eps)

    def forward(self, op, x, rotary, bias):
        return self.output(op, self.self(op, x, rotary, bias), x)


class RoFormerLayer(nn.Module):
    def __init__(self, config: RoFormerConfig) -> None:
        super().__init__()
        hidden, inner = config.hidden_size, config.intermediate_size
        self.attention = RoFormerAttention(config)
        self.intermediate = BertIntermediate(hidden, inner, config.hidden_act)
        self.output = BertResidualOutput(inner, hidden, config.layer_norm_eps)

    def forward(self, op, x, rotary, bias):
        x = self.attention(op, x, rotary, bias)
        return self.output(op, self.intermediate(op, x), x)


class RoFormerEncoder(nn.Module):
    def __init__(self, config: RoFormerConfig) -> None:
        super().__init__()
        self.embed_positions = RoFormerSinusoidalPositions(
            config.max_position_embeddings, config.head_dim
        )
        self.layer = nn.ModuleList([RoFormerLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, op, x, position_ids, bias):
        rotary = self.embed_positions(op, position_ids)  # shared by every layer
        for layer in self.layer:
            x = layer(op, x, rotary, bias)
        return x


class RoFormerModel(nn.Module):
    def __init__(self, config: RoFormerConfig) -> None:
        super().__init__()
        self.embeddings = RoFormerEmbeddings(config)
        self.embeddings_project = None
        if config.embedding_size != config.hidden_size:
            self.embeddings_project = Linear(config.embedding_size, config.hidden_size, True)
        self.encoder = RoFormerEncoder(config)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        x = self.embeddings(op, input_ids, token_type_ids)
        if self.embeddings_project is not None:
            x = self.embeddings_project(op, x)  # [batch, seq, hidden]
        bias = padding_bias(op, attention_mask, x.dtype)
        return self.encoder(op, x, sequence_positions(op, input_ids), bias)


class RoFormerPredictionHeadTransform(nn.Module):
    def __init__(self, config: RoFormerConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.embedding_size, bias=True)
        self.act = get_activation(config.hidden_act)
        self.LayerNorm = LayerNorm(config.embedding_size, config.layer_norm_eps)

    def forward(self, op, x):
        return self.LayerNorm(op, self.act(op, self.dense(op, x)))  # [batch, seq, embedding]


class RoFormerLMPredictionHead(nn.Module):
    """``transform`` (dense to ``embedding_size``, activation, LayerNorm), then the decoder.

    Tied, the decoder is the word embeddings plus ``bias``; untied it has its own
    weight and bias, and ``bias`` is unused (as in BERT).
    """

    def __init__(self, config: RoFormerConfig, embeddings: Embedding) -> None:
        super().__init__()
        self.transform = RoFormerPredictionHeadTransform(config)
        if config.tie_word_embeddings:
            self.bias, self.decoder = nn.Parameter([config.vocab_size]), None
        else:
            self.bias = None
            self.decoder = Linear(config.embedding_size, config.vocab_size, bias=True)
        object.__setattr__(self, "embeddings", embeddings)  # owned by roformer.embeddings

    def forward(self, op, x):
        x = self.transform(op, x)
        if self.decoder is not None:
            return self.decoder(op, x)
        table = op.Transpose(self.embeddings.weight, perm=[1, 0])  # [embedding_size, vocab]
        return op.Add(op.MatMul(x, table), self.bias)


class RoFormerOnlyMLMHead(nn.Module):
    def __init__(self, config: RoFormerConfig, embeddings: Embedding) -> None:
        super().__init__()
        self.predictions = RoFormerLMPredictionHead(config, embeddings)

    def forward(self, op, x):
        return self.predictions(op, x)


class RoFormerClassificationHead(nn.Module):
    """``out_proj(act(dense(x[:, 0])))``: sequence classification on the first token."""

    def __init__(self, config: RoFormerConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size, bias=True)
        self.out_proj = Linear(config.hidden_size, config.num_labels, bias=True)
        self.act = get_activation(config.hidden_act)

    def forward(self, op, x):
        first = op.Gather(x, op.Constant(value_int=0), axis=1)  # [batch, hidden]
        return self.out_proj(op, self.act(op, self.dense(op, first)))


class RoFormerForFeatureExtraction(nn.Module):
    """The encoder and the head its config names (``roformer.*``, ``cls.*``, ``classifier``)."""

    config_class = RoFormerConfig
    task = "feature-extraction"
    uses_token_type_ids = True

    def __init__(self, config: RoFormerConfig) -> None:
        super().__init__()
        self.config = config
        self.roformer = RoFormerModel(config)
        self.cls = self.classifier = None
        if config.head == "masked-lm":
            self.cls = RoFormerOnlyMLMHead(config, self.roformer.embeddings.word_embeddings)
        elif config.head == "sequence-classification":
            self.classifier = RoFormerClassificationHead(config)
        elif config.head == "token-classification":
            self.classifier = Linear(config.hidden_size, config.num_labels, bias=True)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        hidden = self.roformer(op, input_ids, attention_mask, token_type_ids)
        outputs = {"last_hidden_state": hidden}
        if self.cls is not None:
            outputs["logits"] = self.cls(op, hidden)
        elif self.classifier is not None:
            outputs["logits"] = self.classifier(op, hidden)
        return outputs

    @property
    def ignored_weights(self) -> tuple[str, ...]:
        """Checkpoint tensors no graph of this head reads (the other heads)."""
        ignored = []
        if self.cls is None:
            ignored.append("cls.predictions.*")
        if self.classifier is None:
            ignored.append("classifier.*")
        return tuple(ignored)

    def preprocess_weights(self, weights: dict) -> dict:
        """A bare ``RoFormerModel`` gets the ``roformer.`` prefix; the tied decoder is dropped."""
        heads = ("roformer.", "cls.", "classifier.")
        weights = {k if k.startswith(heads) else f"roformer.{k}": v for k, v in weights.items()}
        if self.config.tie_word_embeddings:  # the word embeddings and cls.predictions.bias
            weights.pop("cls.predictions.decoder.weight", None)
            weights.pop("cls.predictions.decoder.bias", None)
        else:  # the decoder's own bias is the one used
            weights.pop("cls.predictions.bias", None)
        return weights


MODEL_TYPES = {"roformer": RoFormerForFeatureExtraction}
