"""CPM-Ant: a prefix of learned prompt tokens, segment embeddings, bucketed relative position bias.

transformers' ``CpmAntModel`` prepends ``prompt_length`` prompt tokens (ids
``vocab + 2*prompt_length ...``, rows of ``input_embedding``) to the first call
and keeps their keys and values in the cache, so the cache holds
``prompt_length`` more positions than ``attention_mask`` counts. The graph
prepends them when the cache is empty (its past length is 0) and drops their
outputs. Attention is not causal: every query sees every real key (prompt and
tokens alike; transformers' ``context`` is all ones), so a prefill attends both
ways and a decode step sees everything before it. Tokens are segment 2, the
prompt segment 0; padding (id 0 in transformers, ``attention_mask`` 0 here) is
segment 0 and masked as a key. The bias of a pair is the bucket of the key
position minus the query position (bidirectional, log-spaced beyond half the
buckets' half) where both are in one segment, else a per-segment-pair bucket.
All positions count in the cache's index space, prompt included.

transformers re-reads the whole sequence at every step (its forward slices off
the cached part); the graph decodes from its cache as the contract has it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    Linear,
    RMSNorm,
    get_activation,
    lowest_value,
    merge_heads,
    split_heads,
)
from mobius.config import ArchitectureConfig
from mobius.model import Model

FLOAT, INT64 = ir.DataType.FLOAT, ir.DataType.INT64


@dataclass
class CpmAntConfig(ArchitectureConfig):
    """``CpmAntConfig``: the prompt, segments and position buckets besides the usual sizes."""

    prompt_types: int = 32
    prompt_length: int = 32
    segment_types: int = 32
    position_bias_num_buckets: int = 512
    position_bias_max_distance: int = 2048

    @classmethod
    def hf_fields(cls, hf_config) -> dict:
        fields = super().hf_fields(hf_config)
        fields.update(
            intermediate_size=hf_config.dim_ff,
            num_key_value_heads=hf_config.num_attention_heads,
            head_dim=hf_config.dim_head,
            rms_norm_eps=hf_config.eps,
            hidden_act="gelu",
            rope=None,
            tie_word_embeddings=False,  # lm_head is its own tensor in checkpoints
        )
        names = ("prompt_types", "prompt_length", "segment_types")
        fields.update({n: getattr(hf_config, n) for n in names})
        fields.update(
            position_bias_num_buckets=hf_config.position_bias_num_buckets,
            position_bias_max_distance=hf_config.position_bias_max_distance,
        )
        return fields


def _ints(op, v):
    return op.Constant(value=ir.tensor(np.array(v, np.int64)))


def position_bucket(op, relative, num_buckets: int, max_distance: int):
    """transformers' bidirectional ``_position_bucket`` of ``relative`` (int64, key minus query)."""
    half = num_buckets // 2
    max_exact = half // 2
    base = op.Mul(op.Cast(op.Greater(relative, _ints(op, 0)), to=INT64), _ints(op, half))
    distance = op.Abs(relative)
    ratio = op.Div(op.Cast(distance, to=FLOAT), float(max_exact))
    scaled = op.Mul(
        op.Div(op.Log(ratio), math.log(max_distance / max_exact)), float(half - max_exact)
    )
    large = op.Add(_ints(op, max_exact), op.Cast(op.Cast(scaled, to=ir.DataType.INT32), to=INT64))
    large = op.Min(large, _ints(op, half - 1))
    return op.Add(base, op.Where(op.Less(distance, _ints(op, max_exact)), distance, large))


class CpmAntSegmentPositionEmbedding(nn.Module):
    """``relative_attention_bias [segments^2 + buckets, heads]`` read per (query, key) pair."""

    def __init__(self, config: CpmAntConfig) -> None:
        super().__init__()
        rows = config.segment_types**2 + config.position_bias_num_buckets
        self.relative_attention_bias = nn.Parameter([rows, config.num_attention_heads])
        self.buckets = config.position_bias_num_buckets
        self.max_distance = config.position_bias_max_distance
        self.segments = config.segment_types

    def forward(self, op, query_pos, key_pos, query_segment, key_segment):
        """Positions ``[seq]``/``[total]``, segments ``[b, seq]``/``[b, total]`` -> ``[b, heads, seq, total]``."""
        relative = op.Sub(op.Unsqueeze(key_pos, [0]), op.Unsqueeze(query_pos, [1]))  # [seq, total]
        absolute = position_bucket(op, relative, self.buckets, self.max_distance)
        qs, ks = op.Unsqueeze(query_segment, [2]), op.Unsqueeze(key_segment, [1])
        pair = op.Add(op.Add(op.Mul(qs, _ints(op, self.segments)), ks), _ints(op, self.buckets))
        bucket = op.Where(op.Equal(qs, ks), op.Unsqueeze(absolute, [0]), pair)  # [b, seq, total]
        bias = op.Gather(self.relative_attention_bias, bucket, axis=0)  # [b, seq, total, heads]
        return op.Transpose(bias, perm=[0, 3, 1, 2])


class CpmAntAttention(nn.Module):
    """Multi-head attention (``project_q/k/v``, ``attention_out``), bias added before the mask."""

    def __init__(self, config: CpmAntConfig) -> None:
        super().__init__()
        hidden, heads, d = config.hidden_size, config.num_attention_heads, config.head_dim
        self.project_q = Linear(hidden, heads * d)
        self.project_k = Linear(hidden, heads * d)
        self.project_v = Linear(hidden, heads * d)
        self.attention_out = Linear(heads * d, hidden)
        self.heads, self.head_dim = heads, d

    def forward(self, op, x, bias, past_key, past_value):
        q, k, v = (
            split_heads(op, p(op, x), self.heads)
            for p in (self.project_q, self.project_k, self.project_v)
        )
        key = op.Concat(past_key, k, axis=2)  # [b, heads, total, d]
        value = op.Concat(past_value, v, axis=2)
        scores = op.Div(
            op.MatMul(q, op.Transpose(key, perm=[0, 1, 3, 2])), math.sqrt(self.head_dim)
        )
        y = op.MatMul(op.Softmax(op.Add(scores, bias), axis=-1), value)
        return self.attention_out(op, merge_heads(op, y)), (key, value)


class CpmAntSelfAttentionBlock(nn.Module):
    def __init__(self, config: CpmAntConfig) -> None:
        super().__init__()
        self.layernorm_before_attention = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attention = CpmAntAttention(config)

    def forward(self, op, x, bias, past_key, past_value):
        h, present = self.self_attention(
            op, self.layernorm_before_attention(op, x), bias, past_key, past_value
        )
        return op.Add(x, h), present


class CpmAntDenseGatedACT(nn.Module):
    """``gelu(w_0 x) * w_1 x``."""

    def __init__(self, config: CpmAntConfig) -> None:
        super().__init__()
        self.w_0 = Linear(config.hidden_size, config.intermediate_size)
        self.w_1 = Linear(config.hidden_size, config.intermediate_size)
        self.act = get_activation("gelu")

    def forward(self, op, x):
        return op.Mul(self.act(op, self.w_0(op, x)), self.w_1(op, x))


class CpmAntFeedForward(nn.Module):
    def __init__(self, config: CpmAntConfig) -> None:
        super().__init__()
        self.w_in = CpmAntDenseGatedACT(config)
        self.w_out = Linear(config.intermediate_size, config.hidden_size)

    def forward(self, op, x):
        return self.w_out(op, self.w_in(op, x))


class CpmAntFFNBlock(nn.Module):
    def __init__(self, config: CpmAntConfig) -> None:
        super().__init__()
        self.layernorm_before_ffn = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.ffn = CpmAntFeedForward(config)

    def forward(self, op, x):
        return op.Add(x, self.ffn(op, self.layernorm_before_ffn(op, x)))


class CpmAntTransformerBlock(nn.Module):
    def __init__(self, config: CpmAntConfig) -> None:
        super().__init__()
        self.self_att = CpmAntSelfAttentionBlock(config)
        self.ffn = CpmAntFFNBlock(config)

    def forward(self, op, x, bias, past_key, past_value):
        x, present = self.self_att(op, x, bias, past_key, past_value)
        return self.ffn(op, x), present


class CpmAntEncoder(nn.Module):
    def __init__(self, config: CpmAntConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [CpmAntTransformerBlock(config) for _ in range(config.num_hidden_layers)]
        )
        self.output_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, op, x, bias, past):
        presents = []
        for layer, (past_key, past_value) in zip(self.layers, past, strict=True):
            x, present = layer(op, x, bias, past_key, past_value)
            presents.append(present)
        return self.output_layernorm(op, x), presents


class CpmAntModel(nn.Module):
    """``cpmant``: the prompt prefix on the first call, embeddings, position bias, encoder."""

    def __init__(self, config: CpmAntConfig) -> None:
        super().__init__()
        rows = config.vocab_size + config.prompt_types * config.prompt_length
        self.encoder = CpmAntEncoder(config)
        self.segment_embedding = Embedding(config.segment_types, config.hidden_size)
        self.input_embedding = Embedding(rows, config.hidden_size)
        self.position_bias = CpmAntSegmentPositionEmbedding(config)
        self.config = config

    def forward(self, op, input_ids, attention_mask, past):
        c, p = self.config, self.config.prompt_length
        batch = op.Shape(input_ids, start=0, end=1)
        # The prompt goes in front on the first call only: n_prompt is p or 0.
        past_len = op.Shape(past[0][0], start=2, end=3)
        n_prompt = op.Mul(op.Cast(op.Equal(past_len, _ints(op, [0])), to=INT64), _ints(op, [p]))
        first = c.vocab_size + 2 * p  # the prompt of type 2, as transformers' forward has it
        prompt_ids = op.Slice(op.Range(first, first + p, 1), _ints(op, [0]), n_prompt)  # [n_prompt]
        prompt_ids = op.Expand(op.Unsqueeze(prompt_ids, [0]), op.Concat(batch, n_prompt, axis=0))
        ids = op.Concat(prompt_ids, input_ids, axis=1)  # [b, n_prompt + seq]
        # Keys: the prompt, then every token of attention_mask; segment 2 for real tokens.
        real = op.Concat(
            op.Expand(_ints(op, [[1]]), op.Concat(batch, _ints(op, [p]), axis=0)),
            attention_mask,
            axis=1,
        )  # [b, total]
        total = op.Shape(real, start=1, end=2)
        key_pos = op.Range(_ints(op, 0), op.Squeeze(total, [0]), _ints(op, 1))
        is_token = op.Cast(op.GreaterOrEqual(key_pos, _ints(op, p)), to=INT64)
        key_segment = op.Mul(op.Mul(real, op.Unsqueeze(is_token, [0])), _ints(op, 2))
        steps = op.Shape(ids, start=1, end=2)
        query_pos = op.Slice(key_pos, op.Neg(steps), _ints(op, [2**62]))
        query_segment = op.Slice(key_segment, op.Neg(steps), _ints(op, [2**62]), _ints(op, [1]))
        bias = self.position_bias(op, query_pos, key_pos, query_segment, key_segment)
        x = op.Add(self.input_embedding(op, ids), self.segment_embedding(op, query_segment))
        lowest = op.CastLike(op.Constant(value_float=lowest_value(x.dtype)), x)
        zero = op.CastLike(op.Constant(value_float=0.0), x)
        visible = op.Unsqueeze(op.Cast(real, to=ir.DataType.BOOL), [1, 2])  # [b, 1, 1, total]
        bias = op.Add(bias, op.Where(visible, zero, lowest))
        hidden, presents = self.encoder(op, x, bias, past)
        return op.Slice(hidden, n_prompt, _ints(op, [2**62]), _ints(op, [1])), presents


class CpmAntForCausalLM(Model):
    """``lm_head(cpmant(ids))``; the cache's ``past_sequence`` counts the prompt too."""

    config_class = CpmAntConfig

    def __init__(self, config: CpmAntConfig) -> None:
        super().__init__()
        self.config = config
        self.cpmant = CpmAntModel(config)
        self.lm_head = Linear(config.hidden_size, config.vocab_size)

    def kv_cache_shapes(self) -> list[tuple[int, int, int]]:
        c = self.config
        return [(c.num_attention_heads, c.head_dim, c.head_dim)] * c.num_hidden_layers

    def forward(self, op, input_ids, attention_mask, position_ids, past):
        hidden, presents = self.cpmant(op, input_ids, attention_mask, past)
        return self.lm_head(op, hidden), presents


MODEL_TYPES = {"cpmant": CpmAntForCausalLM}
