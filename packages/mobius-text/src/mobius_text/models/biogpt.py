"""BioGPT: embeddings scaled by ``sqrt(hidden)``, OPT's learned positions (offset 2), and
pre-norm fairseq layers; the head is ``output_projection``."""

from __future__ import annotations

import math
from dataclasses import dataclass

from onnxscript import nn

from mobius.components import LayerNorm
from mobius.config import ArchitectureConfig
from mobius_text.models._gpt_common import (
    GPTBackbone,
    GPTForCausalLM,
    OffsetEmbedding,
    PreNormDecoderLayer,
    QKVOutAttention,
    ScaledEmbedding,
)

# Every BioGPT LayerNorm is built with nn.LayerNorm's default epsilon; the config's
# layer_norm_eps (1e-12) is never read by transformers.
_LAYER_NORM_EPS = 1e-5


@dataclass
class BioGptConfig(ArchitectureConfig):
    scale_embedding: bool = True

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        heads = fields["num_attention_heads"]
        fields.update(
            num_key_value_heads=heads,
            head_dim=fields["hidden_size"] // heads,
            rms_norm_eps=_LAYER_NORM_EPS,
            rope=None,
            sliding_window=None,
            layer_types=[],
            scale_embedding=bool(hf_config.scale_embedding),
        )
        return fields


class BioGptModel(GPTBackbone):
    layers_name = "layers"
    norm_name = "layer_norm"

    def __init__(self, config: BioGptConfig) -> None:
        super().__init__(config)
        hidden = config.hidden_size
        scale = math.sqrt(hidden) if config.scale_embedding else 1.0
        self.embed_tokens = ScaledEmbedding(config.vocab_size, hidden, scale)
        self.embed_positions = OffsetEmbedding(config.max_position_embeddings, hidden, offset=2)
        self.layers = nn.ModuleList(
            [
                PreNormDecoderLayer(
                    QKVOutAttention(
                        hidden, config.num_attention_heads, config.head_dim**-0.5, True, True
                    ),
                    hidden,
                    config.intermediate_size,
                    config.hidden_act,
                    bias=True,
                    norm=lambda: LayerNorm(hidden, config.rms_norm_eps),
                )
                for _ in range(config.num_hidden_layers)
            ]
        )
        self.layer_norm = LayerNorm(hidden, config.rms_norm_eps)

    def embed(self, op, input_ids, position_ids):
        return op.Add(self.embed_tokens(op, input_ids), self.embed_positions(op, position_ids))


class BioGptForCausalLM(GPTForCausalLM):
    config_class = BioGptConfig
    model_class = BioGptModel
    backbone_name = "biogpt"
    head_name = "output_projection"

    def input_embedding(self):
        return self.backbone.embed_tokens


MODEL_TYPES = {"biogpt": BioGptForCausalLM}
