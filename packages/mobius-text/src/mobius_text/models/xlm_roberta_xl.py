"""XLM-RoBERTa-XL: pre-LayerNorm RoBERTa with no embedding LayerNorm and a final one in the encoder.

Embeddings are summed and left un-normalised; each layer normalises its inputs
(``attention.self_attn_layer_norm``, then ``LayerNorm`` before the MLP), and
``encoder.LayerNorm`` normalises the last layer's output. Heads are RoBERTa's, under
the ``roberta.`` prefix.
"""

from __future__ import annotations

from onnxscript import nn

from mobius.components import LayerNorm
from mobius_text.models._bert_common import EncoderAsCausalLM, ResidualDense
from mobius_text.models.bert import BertEncoder, BertIntermediate, BertSelfAttention
from mobius_text.models.roberta import (
    RobertaConfig,
    RobertaDecoderConfig,
    RobertaEmbeddings,
    RobertaForFeatureExtraction,
    RobertaModel,
)


class XLMRobertaXLEmbeddings(RobertaEmbeddings):
    """RoBERTa's word, token-type and padding-aware position embeddings, summed (no LayerNorm)."""

    normalized = False


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


class XLMRobertaXLForCausalLM(EncoderAsCausalLM, XLMRobertaXLForFeatureExtraction):
    config_class = RobertaDecoderConfig


MODEL_TYPES = {
    "xlm-roberta-xl": XLMRobertaXLForFeatureExtraction,
    "XLMRobertaXLForCausalLM": XLMRobertaXLForCausalLM,
}
