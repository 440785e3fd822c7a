"""MobileBERT: BERT with narrow bottlenecked layers, stacked feed-forwards and NoNorm.

Word vectors are ``embedding_size`` wide; with ``trigram_input`` each token's is
concatenated with its right and left neighbours' (zero past the ends) and
``embedding_transformation`` projects the 3-gram to ``hidden_size``. Each layer
runs at ``true_hidden_size`` (``intra_bottleneck_size`` with ``use_bottleneck``):
``bottleneck.input`` narrows the layer input, ``bottleneck.attention`` the shared
query/key input (``key_query_shared_bottleneck``; with ``use_bottleneck_attention``
the narrowed input feeds all three), values come from the wide input otherwise;
``num_feedforward_networks - 1`` extra feed-forward blocks (``ffn``) follow the
attention, and ``output.bottleneck`` widens back with a residual to the layer
input. ``normalization_type="no_norm"`` replaces every norm but the masked-LM
head's by ``NoNorm`` (``x * weight + bias``). The embeddings' and each layer's
``output.LayerNorm`` use torch's default eps 1e-5 (transformers passes them none).
The masked-LM decoder is ``[word_embeddings.T; dense.weight]``: the tied
``embedding_size`` rows plus ``hidden_size - embedding_size`` rows of its own.
The module tree follows ``MobileBertFor*`` checkpoints (``mobilebert.*``,
``cls.*``, ``classifier``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, LayerNorm, Linear, bidirectional_attention, module_scope
from mobius.errors import ConfigError
from mobius_text.models._bert_common import MaskedLMHead, first_token
from mobius_text.models.bert import (
    BertConfig,
    BertEmbeddings,
    BertEncoder,
    BertForFeatureExtraction,
    BertIntermediate,
    BertModel,
    BertPredictionHeadTransform,
)

DEFAULT_NORM_EPS = 1e-5  # nn.LayerNorm's, for the norms transformers builds without an eps


@dataclass
class MobileBertConfig(BertConfig):
    embedding_size: int = 128
    trigram_input: bool = True
    use_bottleneck: bool = True
    true_hidden_size: int = 128  # intra_bottleneck_size with use_bottleneck, else hidden_size
    use_bottleneck_attention: bool = False
    key_query_shared_bottleneck: bool = True
    num_feedforward_networks: int = 4
    normalization_type: str = "no_norm"
    classifier_activation: bool = True

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        norm = hf_config.normalization_type
        if norm not in ("no_norm", "layer_norm"):
            raise ConfigError(f"normalization_type {norm!r}: only 'no_norm' and 'layer_norm'")
        use_bottleneck = bool(hf_config.use_bottleneck)
        return dict(
            fields,
            embedding_size=hf_config.embedding_size,
            trigram_input=bool(hf_config.trigram_input),
            use_bottleneck=use_bottleneck,
            true_hidden_size=(
                hf_config.intra_bottleneck_size if use_bottleneck else fields["hidden_size"]
            ),
            use_bottleneck_attention=bool(hf_config.use_bottleneck_attention),
            key_query_shared_bottleneck=bool(hf_config.key_query_shared_bottleneck),
            num_feedforward_networks=hf_config.num_feedforward_networks,
            normalization_type=norm,
            classifier_activation=bool(hf_config.classifier_activation),
        )


class NoNorm(nn.Module):
    """``x * weight + bias``: MobileBERT's elementwise stand-in for LayerNorm."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([dim])
        self.bias = nn.Parameter([dim])

    def forward(self, op, x):
        return op.Add(op.Mul(x, self.weight), self.bias)


def make_norm(config: MobileBertConfig, dim: int, eps: float) -> nn.Module:
    return NoNorm(dim) if config.normalization_type == "no_norm" else LayerNorm(dim, eps)


def shift(op, x, step: int):
    """``x [batch, seq, dim]`` moved ``step`` tokens along the sequence (-1: token t+1 at t), zero-filled."""
    int64 = lambda v: op.Constant(value=ir.tensor(np.array(v, np.int64)))  # noqa: E731
    if step < 0:  # x[:, 1:], then a zero row at the end
        return op.Pad(
            op.Slice(x, int64([1]), int64([2**62]), int64([1])), int64([0, 0, 0, 0, 1, 0])
        )
    return op.Pad(op.Slice(x, int64([0]), int64([-1]), int64([1])), int64([0, 1, 0, 0, 0, 0]))


class MobileBertEmbeddings(BertEmbeddings):
    """BERT's embeddings with narrow word vectors, as 3-grams or not, projected to ``hidden_size``."""

    def __init__(self, config: MobileBertConfig) -> None:
        super().__init__(config)
        self.word_embeddings = Embedding(config.vocab_size, config.embedding_size)
        self.LayerNorm = make_norm(config, config.hidden_size, DEFAULT_NORM_EPS)
        self.trigram_input = config.trigram_input
        width = config.embedding_size * (3 if config.trigram_input else 1)
        projects = config.trigram_input or config.embedding_size != config.hidden_size
        self.embedding_transformation = (
            Linear(width, config.hidden_size, bias=True) if projects else None
        )

    def forward(self, op, input_ids, token_type_ids):
        x = self.word_embeddings(op, input_ids)  # [batch, seq, embedding_size]
        if self.trigram_input:  # next token's, own, previous token's
            x = op.Concat(shift(op, x, -1), x, shift(op, x, 1), axis=2)
        if self.embedding_transformation is not None:
            x = self.embedding_transformation(op, x)
        x = op.Add(x, self.position_embeddings(op, self.position_ids(op, input_ids)))
        if self.token_type_embeddings is not None:
            x = op.Add(x, self.token_type_embedding(op, token_type_ids))
        return self.LayerNorm(op, x)


class MobileBertSelfAttention(nn.Module):
    def __init__(self, config: MobileBertConfig) -> None:
        super().__init__()
        inner = config.true_hidden_size
        value_in = inner if config.use_bottleneck_attention else config.hidden_size
        self.query = Linear(inner, inner, bias=True)
        self.key = Linear(inner, inner, bias=True)
        self.value = Linear(value_in, inner, bias=True)
        heads = config.num_attention_heads
        self.num_heads, self.scale = heads, (inner // heads) ** -0.5

    def forward(self, op, query, key, value, bias):
        q, k, v = self.query(op, query), self.key(op, key), self.value(op, value)
        return bidirectional_attention(op, q, k, v, bias, self.num_heads, self.scale)


class MobileBertResidualOutput(nn.Module):
    """``LayerNorm(dense(x) + residual)``, the norm a NoNorm or not."""

    def __init__(self, config: MobileBertConfig, in_features: int, out_features: int, eps: float):
        super().__init__()
        self.dense = Linear(in_features, out_features, bias=True)
        self.LayerNorm = make_norm(config, out_features, eps)

    def forward(self, op, x, residual):
        return self.LayerNorm(op, op.Add(self.dense(op, x), residual))


class MobileBertAttention(nn.Module):
    def __init__(self, config: MobileBertConfig) -> None:
        super().__init__()
        inner = config.true_hidden_size
        self.self = MobileBertSelfAttention(config)
        self.output = MobileBertResidualOutput(config, inner, inner, config.layer_norm_eps)

    def forward(self, op, query, key, value, layer_input, bias):
        return self.output(op, self.self(op, query, key, value, bias), layer_input)


class MobileBertOutput(MobileBertResidualOutput):
    """The last feed-forward's output (norm at eps 1e-5), then ``bottleneck`` back to the wide input."""

    def __init__(self, config: MobileBertConfig) -> None:
        inner = config.true_hidden_size
        super().__init__(config, config.intermediate_size, inner, DEFAULT_NORM_EPS)
        self.bottleneck = (
            MobileBertResidualOutput(config, inner, config.hidden_size, config.layer_norm_eps)
            if config.use_bottleneck
            else None
        )

    def forward(self, op, x, residual, layer_input):
        x = super().forward(op, x, residual)
        return x if self.bottleneck is None else self.bottleneck(op, x, layer_input)


class BottleneckLayer(nn.Module):
    def __init__(self, config: MobileBertConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.true_hidden_size, bias=True)
        self.LayerNorm = make_norm(config, config.true_hidden_size, config.layer_norm_eps)

    def forward(self, op, x):
        return self.LayerNorm(op, self.dense(op, x))


class Bottleneck(nn.Module):
    def __init__(self, config: MobileBertConfig) -> None:
        super().__init__()
        self.input = BottleneckLayer(config)
        self.use_bottleneck_attention = config.use_bottleneck_attention
        shared = config.key_query_shared_bottleneck and not config.use_bottleneck_attention
        self.attention = BottleneckLayer(config) if shared else None

    def forward(self, op, x):
        """``(query, key, value, layer_input)`` inputs of the attention block."""
        narrow = self.input(op, x)
        if self.use_bottleneck_attention:
            return narrow, narrow, narrow, narrow
        shared = self.attention(op, x) if self.attention is not None else x
        return shared, shared, x, narrow


class FFNLayer(nn.Module):
    def __init__(self, config: MobileBertConfig) -> None:
        super().__init__()
        inner, wide = config.true_hidden_size, config.intermediate_size
        self.intermediate = BertIntermediate(inner, wide, config.hidden_act)
        self.output = MobileBertResidualOutput(config, wide, inner, config.layer_norm_eps)

    def forward(self, op, x):
        return self.output(op, self.intermediate(op, x), x)


class MobileBertLayer(nn.Module):
    def __init__(self, config: MobileBertConfig) -> None:
        super().__init__()
        self.attention = MobileBertAttention(config)
        self.intermediate = BertIntermediate(
            config.true_hidden_size, config.intermediate_size, config.hidden_act
        )
        self.output = MobileBertOutput(config)
        self.bottleneck = Bottleneck(config) if config.use_bottleneck else None
        extra = [FFNLayer(config) for _ in range(config.num_feedforward_networks - 1)]
        self.ffn = nn.ModuleList(extra) if extra else None

    def forward(self, op, x, bias):
        inputs = self.bottleneck(op, x) if self.bottleneck is not None else (x, x, x, x)
        h = self.attention(op, *inputs, bias)
        for ffn in self.ffn or ():
            h = ffn(op, h)
        return self.output(op, self.intermediate(op, h), h, x)


class MobileBertEncoder(BertEncoder):
    layer_class = MobileBertLayer


class FirstToken(nn.Module):
    """The pooler of ``classifier_activation=False``: the first token's state as it is."""

    def forward(self, op, x):
        return first_token(op, x)


class MobileBertModel(BertModel):
    embeddings_class = MobileBertEmbeddings
    encoder_class = MobileBertEncoder

    def __init__(self, config: MobileBertConfig) -> None:
        super().__init__(config)
        if self.pooler is not None and not config.classifier_activation:
            self.pooler = FirstToken()  # no dense, no tanh


class OutputRows(nn.Module):
    """``dense.weight [hidden_size - embedding_size, vocab]``: the decoder rows past the embeddings."""

    def __init__(self, rows: int, vocab_size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([rows, vocab_size])

    def forward(self, op):
        return self.weight


class MobileBertLMPredictionHead(MaskedLMHead):
    """BERT's transform, then ``x @ [decoder.weight.T; dense.weight] + bias``.

    Tied, ``decoder.weight`` is the word embeddings and ``bias`` the bias; untied
    (``tie_word_embeddings=False``) the ``decoder`` Linear has its own weight and bias.
    """

    def __init__(self, config: MobileBertConfig, embeddings: Embedding) -> None:
        width, vocab = config.embedding_size, config.vocab_size
        super().__init__(width, vocab, embeddings, config.tie_word_embeddings)
        self.transform = BertPredictionHeadTransform(config)
        self.dense = OutputRows(config.hidden_size - width, vocab)

    def forward(self, op, x):
        x = self.transform(op, x)
        if self.decoder is None:
            top, bias = op.Transpose(self.embeddings.weight, perm=[1, 0]), self.bias
        else:
            with module_scope(op, self.decoder):  # its weight is kept [embedding_size, vocab]
                top, bias = self.decoder.weight, self.decoder.bias
        table = op.Concat(top, self.dense(op), axis=0)  # [hidden, vocab]
        return op.Add(op.MatMul(x, table), bias)


class MobileBertOnlyMLMHead(nn.Module):
    def __init__(self, config: MobileBertConfig, embeddings: Embedding) -> None:
        super().__init__()
        self.predictions = MobileBertLMPredictionHead(config, embeddings)

    def forward(self, op, x):
        return self.predictions(op, x)


class MobileBertForFeatureExtraction(BertForFeatureExtraction):
    """BERT's classification heads and MobileBERT's masked-LM head on its encoder (``mobilebert.*``)."""

    config_class = MobileBertConfig
    base_model_prefix = "mobilebert"
    model_class = MobileBertModel

    def masked_lm_head(self, config: MobileBertConfig) -> nn.Module:
        """Its own decoder layout, under BERT's names."""
        return MobileBertOnlyMLMHead(config, self.base_model.embeddings.word_embeddings)

    @property
    def ignored(self) -> tuple[str, ...]:
        """BERT's, and the parts transformers builds but this config never runs."""
        ignored = list(super().ignored)
        if self.base_model.embeddings.embedding_transformation is None:
            ignored.append("mobilebert.embeddings.embedding_transformation.*")
        config = self.config
        if config.use_bottleneck and config.use_bottleneck_attention:
            ignored.append("mobilebert.encoder.layer.*.bottleneck.attention.*")
        return tuple(ignored)


MODEL_TYPES = {"mobilebert": MobileBertForFeatureExtraction}
