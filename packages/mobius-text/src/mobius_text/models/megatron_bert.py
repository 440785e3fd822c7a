"""Megatron-BERT: BERT with pre-LayerNorm layers, no embedding LayerNorm and a final ``encoder.ln``.

Each block is ``x + f(ln(x))`` (``attention.ln``, then the layer's ``ln`` before the
MLP); the embeddings are summed and left un-normalised. Positions, token types, the
pooler and the ``cls.predictions`` / ``classifier`` heads are BERT's, under ``bert.``.
"""

from __future__ import annotations

from onnxscript import nn

from mobius.components import LayerNorm
from mobius_text.models._bert_common import EncoderAsCausalLM, ResidualDense
from mobius_text.models.bert import (
    BertConfig,
    BertDecoderConfig,
    BertEmbeddings,
    BertEncoder,
    BertForFeatureExtraction,
    BertIntermediate,
    BertModel,
    BertSelfAttention,
)


class MegatronBertEmbeddings(BertEmbeddings):
    """BERT's word, position and token-type embeddings, summed (no LayerNorm)."""

    normalized = False


class MegatronBertAttention(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.ln = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.self = BertSelfAttention(config.hidden_size, config.num_attention_heads)
        self.output = ResidualDense(config.hidden_size, config.hidden_size)

    def forward(self, op, x, bias):
        return self.output(op, self.self(op, self.ln(op, x), bias), x)


class MegatronBertLayer(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = MegatronBertAttention(config)
        self.ln = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.intermediate = BertIntermediate(
            config.hidden_size, config.intermediate_size, config.hidden_act
        )
        self.output = ResidualDense(config.intermediate_size, config.hidden_size)

    def forward(self, op, x, bias):
        x = self.attention(op, x, bias)  # pre-norm: the residual stream stays un-normalised
        return self.output(op, self.intermediate(op, self.ln(op, x)), x)


class MegatronBertEncoder(BertEncoder):
    layer_class = MegatronBertLayer

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.ln = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, x, bias):
        return self.ln(op, super().forward(op, x, bias))


class MegatronBertModel(BertModel):
    embeddings_class = MegatronBertEmbeddings
    encoder_class = MegatronBertEncoder


class MegatronBertForFeatureExtraction(BertForFeatureExtraction):
    """BERT's heads (``cls.predictions``, pooler + ``classifier``) on the Megatron encoder."""

    model_class = MegatronBertModel


class MegatronBertForCausalLM(EncoderAsCausalLM, MegatronBertForFeatureExtraction):
    config_class = BertDecoderConfig
    lm_head_name = "cls"


MODEL_TYPES = {
    "megatron-bert": MegatronBertForFeatureExtraction,
    "MegatronBertForCausalLM": MegatronBertForCausalLM,
}
