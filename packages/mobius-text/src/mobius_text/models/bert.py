"""BERT: learned absolute positions and token types, post-norm encoder layers, optional heads.

The module tree follows ``BertFor*`` checkpoints (``bert.*``, ``cls.*``,
``classifier``); a bare ``BertModel`` checkpoint gets the ``bert.`` prefix added.
``BertLMHeadModel`` (``is_decoder=True``) is the same tree as a causal LM.
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
from mobius_text.models._bert_common import (
    POOLED_HEADS,
    DecoderCache,
    DecoderConfig,
    EncoderAsCausalLM,
    EncoderForFeatureExtraction,
    MaskedLMHead,
    first_token,
)


@dataclass
class BertConfig(EncoderConfig):
    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        kind = getattr(hf_config, "position_embedding_type", "absolute") or "absolute"
        if kind != "absolute":
            raise ConfigError(f"position_embedding_type {kind!r} is not built; only 'absolute'")
        return super().hf_fields(hf_config)


class BertEmbeddings(nn.Module):
    normalized = True  # Megatron-BERT and XLM-R XL leave the sum to the first layer's norm

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = (
            Embedding(config.type_vocab_size, config.hidden_size)
            if config.type_vocab_size
            else None
        )
        self.LayerNorm = (
            LayerNorm(config.hidden_size, config.layer_norm_eps) if self.normalized else None
        )

    def position_ids(self, op, input_ids):
        """``[1, seq]``: 0, 1, 2... (every row starts at 0; padding sits at the end)."""
        seq_len = op.Squeeze(op.Slice(op.Shape(input_ids), [1], [2]), [0])
        return op.Unsqueeze(op.Range(0, seq_len, 1), [0])

    def token_type_embedding(self, op, token_type_ids):
        """``[batch, seq, hidden]``, or type 0's row ``[hidden]`` when the graph has no token types."""
        if token_type_ids is None:  # as transformers does without them: every token is type 0
            token_type_ids = op.Constant(value_int=0)
        return self.token_type_embeddings(op, token_type_ids)

    def forward(self, op, input_ids, token_type_ids, position_ids=None):
        """``position_ids`` given (a decoder's): read there instead of :meth:`position_ids`."""
        x = self.word_embeddings(op, input_ids)  # [batch, seq, hidden]
        if self.token_type_embeddings is not None:
            x = op.Add(x, self.token_type_embedding(op, token_type_ids))
        if position_ids is None:
            position_ids = self.position_ids(op, input_ids)
        x = op.Add(x, self.position_embeddings(op, position_ids))
        return self.LayerNorm(op, x) if self.LayerNorm is not None else x


class BertSelfAttention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int) -> None:
        super().__init__()
        self.query = Linear(hidden_size, hidden_size, bias=True)
        self.key = Linear(hidden_size, hidden_size, bias=True)
        self.value = Linear(hidden_size, hidden_size, bias=True)
        self.num_heads, self.scale = num_heads, (hidden_size // num_heads) ** -0.5

    def forward(self, op, x, bias):
        q, k, v = self.query(op, x), self.key(op, x), self.value(op, x)
        if isinstance(bias, DecoderCache):  # the encoder run as a decoder (``*ForCausalLM``)
            return bias.attend(op, q, k, v, self.num_heads, self.scale)
        return bidirectional_attention(op, q, k, v, bias, self.num_heads, self.scale)


class BertResidualOutput(nn.Module):
    """``LayerNorm(dense(x) + residual)``: BERT's ``attention.output`` and ``output``."""

    def __init__(self, in_features: int, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.dense = Linear(in_features, hidden_size, bias=True)
        self.LayerNorm = LayerNorm(hidden_size, eps)

    def forward(self, op, x, residual):
        return self.LayerNorm(op, op.Add(self.dense(op, x), residual))


class BertAttention(nn.Module):
    """``self`` attention (BERT's, or a variant's), then the post-norm residual ``output``."""

    def __init__(self, config: BertConfig, self_attention: nn.Module | None = None) -> None:
        super().__init__()
        self.self = self_attention or BertSelfAttention(
            config.hidden_size, config.num_attention_heads
        )
        self.output = BertResidualOutput(
            config.hidden_size, config.hidden_size, config.layer_norm_eps
        )

    def forward(self, op, x, bias):
        return self.output(op, self.self(op, x, bias), x)


class BertIntermediate(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, act: str) -> None:
        super().__init__()
        self.dense = Linear(hidden_size, intermediate_size, bias=True)
        self.act = get_activation(act)

    def forward(self, op, x):
        return self.act(op, self.dense(op, x))


class BertLayer(nn.Module):
    def __init__(self, config: BertConfig, attention: nn.Module | None = None) -> None:
        super().__init__()
        self.attention = attention or BertAttention(config)
        self.intermediate = BertIntermediate(
            config.hidden_size, config.intermediate_size, config.hidden_act
        )
        self.output = BertResidualOutput(
            config.intermediate_size, config.hidden_size, config.layer_norm_eps
        )

    def forward(self, op, x, bias):
        x = self.attention(op, x, bias)  # post-norm: each block ends in its LayerNorm
        return self.output(op, self.intermediate(op, x), x)


class BertEncoder(nn.Module):
    layer_class = BertLayer  # a variant's layer (pre-norm...) sets its own

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        layers = [self.layer_class(config) for _ in range(config.num_hidden_layers)]
        self.layer = nn.ModuleList(layers)

    def forward(self, op, x, bias):
        for layer in self.layer:
            x = layer(op, x, bias)
        return x


class BertPooler(nn.Module):
    """``tanh(dense(x[:, 0]))``: the first token's state, for sequence classification."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.dense = Linear(hidden_size, hidden_size, bias=True)

    def forward(self, op, x):
        return op.Tanh(self.dense(op, first_token(op, x)))


class BertModel(nn.Module):
    embeddings_class = BertEmbeddings  # variants set their own parts
    encoder_class = BertEncoder
    pooled = True  # False: the variant's classifier reads the first token itself

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.embeddings = self.embeddings_class(config)
        self.encoder = self.encoder_class(config)
        uses_pooler = self.pooled and config.head in POOLED_HEADS
        self.pooler = BertPooler(config.hidden_size) if uses_pooler else None

    def forward(self, op, input_ids, attention_mask, token_type_ids, **extra):
        """``(last_hidden_state, pooled or None)``; called here, the pooler's weights stay ``bert.pooler``.

        ``extra``: a variant's own inputs (LayoutLM's ``bbox``), for its embeddings.
        """
        x = self.embeddings(op, input_ids, token_type_ids, **extra)
        x = self.encoder(op, x, padding_bias(op, attention_mask, x.dtype))
        return x, self.pooler(op, x) if self.pooler is not None else None


class BertPredictionHeadTransform(nn.Module):
    """``LayerNorm(act(dense(x)))``, ``width`` wide: the hidden size, or a narrower embedding size."""

    def __init__(self, config: BertConfig, width: int | None = None) -> None:
        super().__init__()
        width = width or config.hidden_size
        self.dense = Linear(config.hidden_size, width, bias=True)
        self.act = get_activation(config.hidden_act)
        self.LayerNorm = LayerNorm(width, config.layer_norm_eps)

    def forward(self, op, x):
        return self.LayerNorm(op, self.act(op, self.dense(op, x)))


class BertLMPredictionHead(MaskedLMHead):
    """The masked-LM head: ``transform``, then the decoder (tied: the word embeddings plus ``bias``)."""

    def __init__(self, config: BertConfig, embeddings: Embedding, width: int | None = None) -> None:
        width = width or config.hidden_size
        super().__init__(width, config.vocab_size, embeddings, config.tie_word_embeddings)
        self.transform = BertPredictionHeadTransform(config, width)

    def forward(self, op, x):
        return self.decode(op, self.transform(op, x))


class BertOnlyMLMHead(nn.Module):
    def __init__(self, config: BertConfig, embeddings: Embedding, width: int | None = None) -> None:
        super().__init__()
        self.predictions = BertLMPredictionHead(config, embeddings, width)

    def forward(self, op, x):
        return self.predictions(op, x)


class BertForFeatureExtraction(EncoderForFeatureExtraction):
    """The encoder and the head its config names (see :class:`mobius.config.EncoderConfig`).

    Multiple choice scores each choice as sequence classification with one label.
    """

    config_class = BertConfig
    uses_token_type_ids = True
    base_model_prefix = "bert"
    model_class = BertModel
    head_names = ("cls", "classifier", "qa_outputs")
    pretraining_heads = ("cls.seq_relationship",)  # next-sentence prediction
    optional_parts = ("pooler",)
    unread = ("embeddings.position_ids", "embeddings.token_type_ids")
    tied_copies = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")
    untied_unused = ("cls.predictions.bias",)

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.uses_token_type_ids = config.type_vocab_size > 0
        if config.head == "masked-lm":
            self.cls = self.masked_lm_head(config)
        elif config.head == "sequence-classification":
            self.classifier = self.sequence_classifier(config)
        elif config.head == "multiple-choice":
            self.classifier = self.choice_classifier(config)
        elif config.head == "token-classification":
            self.classifier = Linear(config.hidden_size, config.num_labels, bias=True)
        elif config.head == "question-answering":
            self.qa_outputs = Linear(config.hidden_size, config.num_labels, bias=True)

    def masked_lm_head(self, config: BertConfig) -> nn.Module:
        """``cls``: BERT's head on the word embeddings; variants return their own."""
        return BertOnlyMLMHead(config, self.base_model.embeddings.word_embeddings)

    def sequence_classifier(self, config: BertConfig) -> nn.Module:
        """``classifier`` on the pooled first token; a variant without a pooler reads the first token."""
        return Linear(config.hidden_size, config.num_labels, bias=True)

    def choice_classifier(self, config: BertConfig) -> nn.Module:
        """``classifier``, one score per choice on the pooled first token."""
        return Linear(config.hidden_size, 1, bias=True)

    def forward(self, op, input_ids, attention_mask, token_type_ids, **extra):
        hidden, pooled = self.base_model(op, input_ids, attention_mask, token_type_ids, **extra)
        outputs = {"last_hidden_state": hidden}
        if self.cls is not None:
            outputs["logits"] = self.cls(op, hidden)
        elif self.classifier is not None:  # sequence level: on the pooled first token
            outputs["logits"] = self.classifier(op, hidden if pooled is None else pooled)
        elif self.qa_outputs is not None:
            outputs["logits"] = self.qa_outputs(op, hidden)
        return outputs


@dataclass
class BertDecoderConfig(DecoderConfig, BertConfig):
    pass


class BertLMHeadModel(EncoderAsCausalLM, BertForFeatureExtraction):
    """BERT as a causal LM: causal self-attention over a KV cache, ``cls`` as the LM head."""

    config_class = BertDecoderConfig
    lm_head_name = "cls"


MODEL_TYPES = {"bert": BertForFeatureExtraction, "BertLMHeadModel": BertLMHeadModel}
