"""XLM-RoBERTa-XL: pre-LayerNorm RoBERTa with no embedding LayerNorm and a final one in the encoder.

Embeddings are summed and left un-normalised; each layer normalises its inputs
(``attention.self_attn_layer_norm``, then ``LayerNorm`` before the MLP), and
``encoder.LayerNorm`` normalises the last layer's output. Heads are RoBERTa's, under
the ``roberta.`` prefix.
"""

from __future__ import annotations

from onnxscript import nn

from mobius.components import Embedding, LayerNorm
from mobius_text.models.bert import BertEncoder, BertIntermediate, BertSelfAttention
from mobius_text.models.roberta import (
    ResidualDense,
    RobertaConfig,
    RobertaForFeatureExtraction,
    RobertaModel,
    padding_aware_position_ids,
)


class XLMRobertaXLEmbeddings(nn.Module):
    """Word, token-type and padding-aware position embeddings, summed (no LayerNorm)."""

    def __init__(self, config: RobertaConfig) -> None:
        super().__init__()
        self.word_embeddings = Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = Embedding(config.type_vocab_size, config.hidden_size)
        self.padding_idx = config.pad_token_id

    def forward(self, op, input_ids, token_type_ids):
        if token_type_ids is None:  # no token_type_ids input: every token is type 0
            token_type_ids = op.Constant(value_int=0)
        x = op.Add(
            self.word_embeddings(op, input_ids), self.token_type_embeddings(op, token_type_ids)
        )
        positions = padding_aware_position_ids(op, input_ids, self.padding_idx)
        return op.Add(x, self.position_embeddings(op, positions))  # [batch, seq, hidden]


class XLMRobertaXLAttention(nn.Module):
    def __init__(self, config: RobertaConfig) -> None:
        super().__init__()
        self.self_attn_layer_norm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.self = BertSelfAttention(config.hidden_size, config.num_attention_heads)
        self.output = ResidualDense(config.hidden_size, config.hidden_size)

    def forward(self, op, x, bias):
        return self.output(op, self.self(op, self.self_attn_layer_norm(op, x), bias), x)


class XLMRobertaXLLayer(nn.Module):
    def __init__(self, config: RobertaConfig) -> None:
        super().__init__()
        self.attention = XLMRobertaXLAttention(config)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.intermediate = BertIntermediate(
            config.hidden_size, config.intermediate_size, config.hidden_act
        )
        self.output = ResidualDense(config.intermediate_size, config.hidden_size)

    def forward(self, op, x, bias):
        x = self.attention(op, x, bias)  # pre-norm: the residual stream stays un-normalised
        return self.output(op, self.intermediate(op, self.LayerNorm(op, x)), x)


class XLMRobertaXLEncoder(BertEncoder):
    layer_class = XLMRobertaXLLayer

    def __init__(self, config: RobertaConfig) -> None:
        super().__init__(config)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, x, bias):
        return self.LayerNorm(op, super().forward(op, x, bias))


class XLMRobertaXLModel(RobertaModel):
    embeddings_class = XLMRobertaXLEmbeddings
    encoder_class = XLMRobertaXLEncoder


class XLMRobertaXLForFeatureExtraction(RobertaForFeatureExtraction):
    """RoBERTa's heads on the XL encoder (``roberta.*``)."""

    model_class = XLMRobertaXLModel


MODEL_TYPES = {"xlm-roberta-xl": XLMRobertaXLForFeatureExtraction}
