"""RemBERT: BERT's encoder with decoupled input and output embeddings.

Inputs are embedded ``input_embedding_size`` wide and widened by
``encoder.embedding_hidden_mapping_in``; the masked-LM head projects down to its
own ``output_embedding_size`` and has its own decoder (never tied to the inputs).
The module tree follows ``RemBertFor*`` checkpoints (``rembert.*``, ``cls.*``,
``classifier``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from onnxscript import nn

from mobius.components import Linear
from mobius.errors import ConfigError
from mobius_text.models._bert_common import DecoderConfig, DenseLMHead, EncoderAsCausalLM
from mobius_text.models.bert import (
    BertConfig,
    BertEmbeddings,
    BertEncoder,
    BertForFeatureExtraction,
    BertModel,
)


@dataclass
class RemBertConfig(BertConfig):
    input_embedding_size: int = 256
    output_embedding_size: int = 1664

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if getattr(hf_config, "is_decoder", False) and not issubclass(cls, DecoderConfig):
            raise ConfigError(
                "is_decoder=True makes RemBERT causal: its checkpoint's class is RemBertForCausalLM"
            )
        fields = super().hf_fields(hf_config)
        fields.update(
            input_embedding_size=hf_config.input_embedding_size,
            output_embedding_size=hf_config.output_embedding_size,
        )
        return fields


class RemBertEmbeddings(BertEmbeddings):
    """BERT's embeddings, ``input_embedding_size`` wide."""

    def __init__(self, config: RemBertConfig) -> None:
        super().__init__(replace(config, hidden_size=config.input_embedding_size))


class RemBertEncoder(BertEncoder):
    def __init__(self, config: RemBertConfig) -> None:
        super().__init__(config)
        self.embedding_hidden_mapping_in = Linear(
            config.input_embedding_size, config.hidden_size, bias=True
        )

    def forward(self, op, x, bias):
        return super().forward(op, self.embedding_hidden_mapping_in(op, x), bias)


class RemBertModel(BertModel):
    embeddings_class = RemBertEmbeddings
    encoder_class = RemBertEncoder


class RemBertOnlyMLMHead(nn.Module):
    """``predictions``: down to ``output_embedding_size``, then its own decoder."""

    def __init__(self, config: RemBertConfig) -> None:
        super().__init__()
        width = config.output_embedding_size
        self.predictions = DenseLMHead(config, width, embeddings=None, tied=False)

    def forward(self, op, x):
        return self.predictions(op, x)


class RemBertForFeatureExtraction(BertForFeatureExtraction):
    """BERT's heads on the RemBERT encoder (``rembert.*``, ``cls.*``, ``classifier``)."""

    config_class = RemBertConfig
    base_model_prefix = "rembert"
    model_class = RemBertModel
    tied_copies = untied_unused = ()  # the decoder is never tied

    def masked_lm_head(self, config: RemBertConfig) -> nn.Module:
        return RemBertOnlyMLMHead(config)


class RemBertDecoderConfig(DecoderConfig, RemBertConfig):
    pass


class RemBertForCausalLM(EncoderAsCausalLM, RemBertForFeatureExtraction):
    config_class = RemBertDecoderConfig
    lm_head_name = "cls"


MODEL_TYPES = {"rembert": RemBertForFeatureExtraction, "RemBertForCausalLM": RemBertForCausalLM}
