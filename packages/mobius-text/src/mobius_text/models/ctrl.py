"""CTRL: embeddings scaled by ``sqrt(n_embd)`` plus a sinusoidal table, pre-norm blocks
(``Wq``/``Wk``/``Wv``/``dense`` attention, a ReLU ``ffn``), and a tied head with its own bias."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from onnxscript import nn

from mobius.components import LayerNorm, Linear, check_constant_size
from mobius.config import ArchitectureConfig
from mobius_text.models._gpt_common import (
    FixedPositions,
    GPTBackbone,
    GPTForCausalLM,
    ScaledEmbedding,
    SelfAttention,
)

_BLOCK_NORM_EPS = 1e-6  # hard-coded in the blocks; the config's epsilon is the final norm's


def ctrl_sinusoids(num_positions: int, dim: int) -> np.ndarray:
    """``[num_positions, dim]``: sines of the even channels' angles, then cosines of the odd
    ones, with rate ``10000^(-2*(i//2)/dim)`` for channel ``i`` (float32, as transformers)."""
    check_constant_size(
        (num_positions, dim), 4, "sinusoidal position table", "max_position_embeddings"
    )
    channel = np.arange(dim, dtype=np.float32)
    rates = np.float32(1) / np.power(np.float32(10000), (2 * (channel // 2)) / np.float32(dim))
    angles = np.arange(num_positions, dtype=np.float32)[:, None] * rates[None, :]
    return np.concatenate([np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])], axis=1)


@dataclass
class CTRLConfig(ArchitectureConfig):
    layer_norm_eps: float = 1e-6

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        heads = fields["num_attention_heads"]
        fields.update(
            intermediate_size=hf_config.dff,
            num_key_value_heads=heads,
            head_dim=fields["hidden_size"] // heads,
            hidden_act="relu",
            layer_norm_eps=hf_config.layer_norm_epsilon,
            rope=None,
            sliding_window=None,
            layer_types=[],
        )
        return fields


class MultiHeadAttention(SelfAttention):
    def __init__(self, config: CTRLConfig) -> None:
        heads, hidden = config.num_attention_heads, config.hidden_size
        super().__init__(heads, heads, config.head_dim, config.head_dim**-0.5)
        self.Wq = Linear(hidden, hidden, bias=True)
        self.Wk = Linear(hidden, hidden, bias=True)
        self.Wv = Linear(hidden, hidden, bias=True)
        self.dense = Linear(hidden, hidden, bias=True)

    def project_qkv(self, op, x):
        return (
            self.split_heads(op, self.Wq(op, x)),
            self.split_heads(op, self.Wk(op, x)),
            self.split_heads(op, self.Wv(op, x)),
        )

    def project_out(self, op, y):
        return self.dense(op, y)


class ReLU(nn.Module):
    def forward(self, op, x):
        return op.Relu(x)


class EncoderLayer(nn.Module):
    """(HF's name.) ``x + attn(layernorm1(x))`` then ``x + ffn(layernorm2(x))``."""

    def __init__(self, config: CTRLConfig) -> None:
        super().__init__()
        hidden, inner = config.hidden_size, config.intermediate_size
        self.multi_head_attention = MultiHeadAttention(config)
        self.ffn = nn.Sequential(Linear(hidden, inner, True), ReLU(), Linear(inner, hidden, True))
        self.layernorm1 = LayerNorm(hidden, _BLOCK_NORM_EPS)
        self.layernorm2 = LayerNorm(hidden, _BLOCK_NORM_EPS)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h, present = self.multi_head_attention(
            op, self.layernorm1(op, x), position_embeddings, bias, past_key, past_value
        )
        x = op.Add(x, h)
        return op.Add(x, self.ffn(op, self.layernorm2(op, x))), present


class CTRLModel(GPTBackbone):
    norm_name = "layernorm"

    def __init__(self, config: CTRLConfig) -> None:
        super().__init__(config)
        hidden = config.hidden_size
        self.w = ScaledEmbedding(config.vocab_size, hidden, math.sqrt(hidden))
        self.pos_encoding = FixedPositions(ctrl_sinusoids(config.max_position_embeddings, hidden))
        self.h = nn.ModuleList([EncoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.layernorm = LayerNorm(hidden, config.layer_norm_eps)

    def embed(self, op, input_ids, position_ids):
        x = self.w(op, input_ids)
        return op.Add(x, self.pos_encoding(op, position_ids, x))


class CTRLLMHeadModel(GPTForCausalLM):
    """The head's weight is ``w`` (when tied, as in every CTRL checkpoint); its bias is its own."""

    config_class = CTRLConfig
    model_class = CTRLModel
    head_bias = True

    def input_embedding(self):
        return self.backbone.w


MODEL_TYPES = {"ctrl": CTRLLMHeadModel}
