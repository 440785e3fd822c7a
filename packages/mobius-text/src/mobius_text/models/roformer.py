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

from mobius.components import Embedding, LayerNorm, Linear, bidirectional_attention, padding_bias
from mobius.config import EncoderConfig
from mobius.errors import ConfigError
from mobius_text.models._bert_common import (
    ClassificationHead,
    DecoderCache,
    DecoderConfig,
    EncoderAsCausalLM,
    EncoderForFeatureExtraction,
    SequenceSummary,
    summary_fields,
)
from mobius_text.models._encoder_rotary import rotate_heads, sequence_positions
from mobius_text.models.bert import (
    BertIntermediate,
    BertOnlyMLMHead,
    BertResidualOutput,
    BertSelfAttention,
)


@dataclass
class RoFormerConfig(EncoderConfig):
    """Encoder fields plus the embedding width and whether values rotate too."""

    embedding_size: int = 0
    rotary_value: bool = False
    #: the multiple-choice head's sequence summary (see :func:`summary_fields`)
    summary_type: str = "last"
    summary_width: int | None = None
    summary_activation: str | None = None

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if getattr(hf_config, "is_decoder", False) and not issubclass(cls, DecoderConfig):
            raise ConfigError(
                "a RoFormer decoder (is_decoder=True) is a causal LM: its checkpoint's class is "
                "RoFormerForCausalLM"
            )
        fields = super().hf_fields(hf_config)
        embedding_size = getattr(hf_config, "embedding_size", None) or fields["hidden_size"]
        return {
            **fields,
            "embedding_size": int(embedding_size),
            "rotary_value": bool(hf_config.rotary_value),
            **summary_fields(hf_config),
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


class RoFormerSelfAttention(BertSelfAttention):
    def __init__(self, config: RoFormerConfig) -> None:
        super().__init__(config.hidden_size, config.num_attention_heads)
        self.rotary_value = config.rotary_value

    def forward(self, op, x, rotary, bias):
        rotate = lambda t: rotate_heads(op, t, rotary, self.num_heads, interleaved=True)  # noqa: E731
        q, k, v = rotate(self.query(op, x)), rotate(self.key(op, x)), self.value(op, x)
        if self.rotary_value:
            v = rotate(v)
        if isinstance(bias, DecoderCache):  # the cache keeps rotated keys, as transformers'
            return bias.attend(op, q, k, v, self.num_heads, self.scale)
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


class RoFormerForFeatureExtraction(EncoderForFeatureExtraction):
    """The encoder and the head its config names (``roformer.*``, ``cls.*``, ``classifier``).

    masked-lm is BERT's ``cls.predictions``, its transform narrowing to ``embedding_size``;
    multiple choice a ``sequence_summary`` and a one-score ``classifier``.
    """

    config_class = RoFormerConfig
    uses_token_type_ids = True
    base_model_prefix = "roformer"
    model_class = RoFormerModel
    head_names = ("cls", "sequence_summary", "classifier", "qa_outputs")
    tied_copies = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")
    untied_unused = ("cls.predictions.bias",)

    def __init__(self, config: RoFormerConfig) -> None:
        super().__init__(config)
        hidden, labels = config.hidden_size, config.num_labels
        if config.head == "masked-lm":
            embeddings = self.roformer.embeddings.word_embeddings
            self.cls = BertOnlyMLMHead(config, embeddings, width=config.embedding_size)
        elif config.head == "sequence-classification":
            self.classifier = ClassificationHead(hidden, labels, config.hidden_act)
        elif config.head == "multiple-choice":
            kind, act, width = config.summary_type, config.summary_activation, config.summary_width
            self.sequence_summary = SequenceSummary(hidden, width, act, kind)
            self.classifier = Linear(width or hidden, 1, bias=True)
        elif config.head == "token-classification":
            self.classifier = Linear(hidden, labels, bias=True)
        elif config.head == "question-answering":
            self.qa_outputs = Linear(hidden, labels, bias=True)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        hidden = self.roformer(op, input_ids, attention_mask, token_type_ids)
        outputs = {"last_hidden_state": hidden}
        if self.sequence_summary is not None:
            hidden = self.sequence_summary(op, hidden)
        heads = (self.cls, self.classifier, self.qa_outputs)
        head = next((h for h in heads if h is not None), None)
        if head is not None:
            outputs["logits"] = head(op, hidden)
        return outputs


class RoFormerDecoderConfig(DecoderConfig, RoFormerConfig):
    pass


class RoFormerForCausalLM(EncoderAsCausalLM, RoFormerForFeatureExtraction):
    """RoFormer as a causal LM: rotary positions from the cache's length (transformers takes no
    ``position_ids``), ``cls`` as the LM head."""

    config_class = RoFormerDecoderConfig
    lm_head_name = "cls"

    def embed(self, op, input_ids, position_ids):
        base = self.base_model
        token_types = op.Mul(input_ids, op.Constant(value_int=0))  # all 0, [batch, seq]
        x = base.embeddings(op, input_ids, token_types)
        return x if base.embeddings_project is None else base.embeddings_project(op, x)

    def encode(self, op, x, cache, input_ids):
        return self.base_model.encoder(op, x, cache.positions(op, input_ids), cache)


MODEL_TYPES = {"roformer": RoFormerForFeatureExtraction, "RoFormerForCausalLM": RoFormerForCausalLM}
