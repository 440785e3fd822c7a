"""XGLM: fairseq sinusoidal positions (offset 2, the ``pad_token_id`` row zeroed), embeddings
scaled by ``sqrt(d_model)``, pre-norm fairseq layers."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from onnxscript import nn

from mobius.components import LayerNorm
from mobius.config import ArchitectureConfig
from mobius_text.models._gpt_common import (
    FixedPositions,
    GPTBackbone,
    GPTForCausalLM,
    PreNormDecoderLayer,
    QKVOutAttention,
    ScaledEmbedding,
)

_POSITION_OFFSET = 2
_LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default; XGLM configs carry no epsilon


def fairseq_sinusoids(num_positions: int, dim: int, padding_idx: int | None) -> np.ndarray:
    """``[num_positions, dim]``: sines then cosines of ``pos * 10000^(-i/(dim/2 - 1))``, in float32
    as transformers computes them; the ``padding_idx`` row is zero."""
    half = dim // 2
    rate = math.log(10000) / (half - 1)
    freqs = np.exp(np.arange(half, dtype=np.float32) * np.float32(-rate))
    angles = np.arange(num_positions, dtype=np.float32)[:, None] * freqs[None, :]
    table = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)
    if dim % 2:
        table = np.concatenate([table, np.zeros((num_positions, 1), np.float32)], axis=1)
    if padding_idx is not None:
        table[padding_idx] = 0
    return table.astype(np.float32)


@dataclass
class XGLMConfig(ArchitectureConfig):
    scale_embedding: bool = True

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        heads = fields["num_attention_heads"]
        fields.update(
            intermediate_size=hf_config.ffn_dim,
            num_key_value_heads=heads,
            head_dim=fields["hidden_size"] // heads,
            hidden_act=hf_config.activation_function,
            rms_norm_eps=_LAYER_NORM_EPS,
            rope=None,
            sliding_window=None,
            layer_types=[],
            scale_embedding=bool(hf_config.scale_embedding),
        )
        return fields


class XGLMModel(GPTBackbone):
    layers_name = "layers"
    norm_name = "layer_norm"

    def __init__(self, config: XGLMConfig) -> None:
        super().__init__(config)
        hidden = config.hidden_size
        scale = math.sqrt(hidden) if config.scale_embedding else 1.0
        self.embed_tokens = ScaledEmbedding(config.vocab_size, hidden, scale)
        table = fairseq_sinusoids(
            config.max_position_embeddings + _POSITION_OFFSET, hidden, config.pad_token_id
        )
        self.embed_positions = FixedPositions(table, _POSITION_OFFSET)
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
        x = self.embed_tokens(op, input_ids)
        return op.Add(x, self.embed_positions(op, position_ids, x))


class XGLMForCausalLM(GPTForCausalLM):
    config_class = XGLMConfig
    model_class = XGLMModel
    backbone_name = "model"

    def input_embedding(self):
        return self.backbone.embed_tokens


MODEL_TYPES = {"xglm": XGLMForCausalLM}
