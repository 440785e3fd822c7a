"""RoBERTa-PreLayerNorm: RoBERTa whose layers normalise their inputs, with a final LayerNorm.

Each block is ``x + f(LayerNorm(x))`` (the attention's LayerNorm sits in
``attention``, the MLP's in ``intermediate``), and ``roberta_prelayernorm.LayerNorm``
normalises the last layer's output. Embeddings and heads are RoBERTa's.
"""

from __future__ import annotations

from onnxscript import nn

from mobius.components import LayerNorm
from mobius_text.models._bert_common import EncoderAsCausalLM, ResidualDense
from mobius_text.models.bert import BertEncoder, BertIntermediate, BertSelfAttention
from mobius_text.models.roberta import (
    RobertaConfig,
    RobertaDecoderConfig,
    RobertaForFeatureExtraction,
    RobertaModel,
)


class RobertaPreLayerNormAttention(nn.Module):
    def __init__(self, config: RobertaConfig) -> None:
        super().__init__()
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.self = BertSelfAttention(config.hidden_size, config.num_attention_heads)
        self.output = ResidualDense(config.hidden_size, config.hidden_size)

    def forward(self, op, x, bias):
        return self.output(op, self.self(op, self.LayerNorm(op, x), bias), x)


class RobertaPreLayerNormIntermediate(BertIntermediate):
    """``act(dense(LayerNorm(x)))``: the MLP's input norm lives here in the checkpoint."""

    def __init__(self, config: RobertaConfig) -> None:
        super().__init__(config.hidden_size, config.intermediate_size, config.hidden_act)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, x):
        return super().forward(op, self.LayerNorm(op, x))


class RobertaPreLayerNormLayer(nn.Module):
    def __init__(self, config: RobertaConfig) -> None:
        super().__init__()
        self.attention = RobertaPreLayerNormAttention(config)
        self.intermediate = RobertaPreLayerNormIntermediate(config)
        self.output = ResidualDense(config.intermediate_size, config.hidden_size)

    def forward(self, op, x, bias):
        x = self.attention(op, x, bias)  # pre-norm: the residual stream stays un-normalised
        return self.output(op, self.intermediate(op, x), x)


class RobertaPreLayerNormEncoder(BertEncoder):
    layer_class = RobertaPreLayerNormLayer


class RobertaPreLayerNormModel(RobertaModel):
    encoder_class = RobertaPreLayerNormEncoder

    def __init__(self, config: RobertaConfig) -> None:
        super().__init__(config)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        return self.LayerNorm(op, super().forward(op, input_ids, attention_mask, token_type_ids))


class RobertaPreLayerNormForFeatureExtraction(RobertaForFeatureExtraction):
    """RoBERTa's heads on the pre-LayerNorm encoder (``roberta_prelayernorm.*``)."""

    base_model_prefix = "roberta_prelayernorm"
    model_class = RobertaPreLayerNormModel


class RobertaPreLayerNormForCausalLM(EncoderAsCausalLM, RobertaPreLayerNormForFeatureExtraction):
    config_class = RobertaDecoderConfig

    def decoder_states(self, op, x):
        return self.base_model.LayerNorm(op, x)  # the model's, after the encoder


MODEL_TYPES = {
    "roberta-prelayernorm": RobertaPreLayerNormForFeatureExtraction,
    "RobertaPreLayerNormForCausalLM": RobertaPreLayerNormForCausalLM,
}
