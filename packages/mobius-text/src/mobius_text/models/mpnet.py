"""MPNet: BERT-style post-norm layers with a T5-style bucketed relative position bias.

Every layer adds the same bias ``relative_attention_bias[bucket(j - i)]`` (one value
per head) to its scores. Positions count from ``padding_idx + 1 = 2`` over the
tokens that are not id 1 (MPNet's padding index, whatever ``pad_token_id`` says), as
transformers' ``create_position_ids_from_input_ids`` does. There are no token types.
The heads are RoBERTa's. The module tree follows ``MPNetFor*`` checkpoints
(``mpnet.*``, ``lm_head.*``, ``classifier.*``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, LayerNorm, Linear, bidirectional_attention, padding_bias
from mobius.config import EncoderConfig
from mobius_text.models.bert import BertIntermediate, BertResidualOutput
from mobius_text.models.roberta import (
    RobertaForFeatureExtraction,
    choice_pooler,
    padding_aware_position_ids,
)

# transformers' MPNetEmbeddings.padding_idx and compute_position_bias' own defaults: the
# bucket count is always 32, whatever relative_attention_num_buckets sizes the table to.
PADDING_IDX, NUM_BUCKETS, MAX_DISTANCE = 1, 32, 128


@dataclass
class MPNetConfig(EncoderConfig):
    relative_attention_num_buckets: int = 32

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        fields["type_vocab_size"] = 0  # MPNet has no token types
        fields["relative_attention_num_buckets"] = hf_config.relative_attention_num_buckets
        return fields


def bucket_table(num_buckets: int = NUM_BUCKETS, max_distance: int = MAX_DISTANCE) -> np.ndarray:
    """The bucket of each distance ``0..max_distance`` in one direction, as transformers computes it.

    Distances under ``max_exact`` have their own bucket, longer ones log-spaced buckets
    up to ``max_distance``, where the last bucket starts. The logs are taken here in
    float32, as PyTorch takes them (a runtime's ``Log`` a ulp off would move exact
    bucket boundaries, such as distance 16 or 64).
    """
    half = num_buckets // 2
    max_exact = half // 2
    n = np.arange(max_distance + 1)
    ratio = np.maximum(n, max_exact).astype(np.float32) / np.float32(max_exact)
    scaled = np.log(ratio) / np.float32(math.log(max_distance / max_exact))
    large = max_exact + (scaled * np.float32(half - max_exact)).astype(np.int64)
    return np.where(n < max_exact, n, np.minimum(large, half - 1))


def relative_position_bucket(op, relative_position):
    """transformers' ``MPNetEncoder.relative_position_bucket`` of ``key - query`` (int64)."""
    int64 = lambda v: op.Constant(value=ir.tensor(np.asarray(v, np.int64)))  # noqa: E731
    n = op.Neg(relative_position)
    direction = op.Mul(op.Cast(op.Less(n, int64(0)), to=ir.DataType.INT64), int64(NUM_BUCKETS // 2))
    # every distance from MAX_DISTANCE on shares the last bucket
    distance = op.Min(op.Abs(n), int64(MAX_DISTANCE))
    return op.Add(direction, op.Gather(int64(bucket_table()), distance, axis=0))


class MPNetEmbeddings(nn.Module):
    def __init__(self, config: MPNetConfig) -> None:
        super().__init__()
        self.word_embeddings = Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = Embedding(config.max_position_embeddings, config.hidden_size)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, input_ids):
        positions = padding_aware_position_ids(op, input_ids, PADDING_IDX)
        x = op.Add(self.word_embeddings(op, input_ids), self.position_embeddings(op, positions))
        return self.LayerNorm(op, x)


class MPNetSelfAttention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int) -> None:
        super().__init__()
        self.q = Linear(hidden_size, hidden_size, bias=True)
        self.k = Linear(hidden_size, hidden_size, bias=True)
        self.v = Linear(hidden_size, hidden_size, bias=True)
        self.o = Linear(hidden_size, hidden_size, bias=True)
        self.num_heads, self.scale = num_heads, (hidden_size // num_heads) ** -0.5

    def forward(self, op, x, bias):
        q, k, v = self.q(op, x), self.k(op, x), self.v(op, x)
        return self.o(op, bidirectional_attention(op, q, k, v, bias, self.num_heads, self.scale))


class MPNetAttention(nn.Module):
    def __init__(self, config: MPNetConfig) -> None:
        super().__init__()
        self.attn = MPNetSelfAttention(config.hidden_size, config.num_attention_heads)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, x, bias):
        return self.LayerNorm(op, op.Add(self.attn(op, x, bias), x))


class MPNetLayer(nn.Module):
    def __init__(self, config: MPNetConfig) -> None:
        super().__init__()
        self.attention = MPNetAttention(config)
        self.intermediate = BertIntermediate(
            config.hidden_size, config.intermediate_size, config.hidden_act
        )
        self.output = BertResidualOutput(
            config.intermediate_size, config.hidden_size, config.layer_norm_eps
        )

    def forward(self, op, x, bias):
        x = self.attention(op, x, bias)
        return self.output(op, self.intermediate(op, x), x)


class MPNetEncoder(nn.Module):
    def __init__(self, config: MPNetConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList([MPNetLayer(config) for _ in range(config.num_hidden_layers)])
        self.relative_attention_bias = Embedding(
            config.relative_attention_num_buckets, config.num_attention_heads
        )

    def position_bias(self, op, x):
        """``[1, heads, seq, seq]``: the learned bias of the bucket of ``key - query``."""
        ids = op.Range(0, op.Squeeze(op.Shape(x, start=1, end=2), [0]), 1)
        relative = op.Sub(op.Unsqueeze(ids, [0]), op.Unsqueeze(ids, [1]))  # [query, key]
        values = self.relative_attention_bias(op, relative_position_bucket(op, relative))
        return op.Unsqueeze(op.Transpose(values, perm=[2, 0, 1]), [0])

    def forward(self, op, x, attention_mask):
        bias = op.Add(self.position_bias(op, x), padding_bias(op, attention_mask, x.dtype))
        for layer in self.layer:
            x = layer(op, x, bias)
        return x


class MPNetModel(nn.Module):
    def __init__(self, config: MPNetConfig) -> None:
        super().__init__()
        self.embeddings = MPNetEmbeddings(config)
        self.encoder = MPNetEncoder(config)
        self.pooler = choice_pooler(config)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        """``last_hidden_state``; MPNet has no token types."""
        return self.encoder(op, self.embeddings(op, input_ids), attention_mask)


class MPNetForFeatureExtraction(RobertaForFeatureExtraction):
    """RoBERTa's heads (``lm_head``, ``classifier``: same modules, same tying) on the MPNet encoder."""

    config_class = MPNetConfig
    base_model_prefix = "mpnet"
    model_class = MPNetModel


MODEL_TYPES = {"mpnet": MPNetForFeatureExtraction}
