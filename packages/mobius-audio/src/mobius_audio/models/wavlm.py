"""WavLM: wav2vec2 whose attention adds a gated, bucketed relative position bias.

The encoder buckets every ``key - query`` frame offset once (T5-style: exact
offsets below ``num_buckets // 4``, log-spaced up to ``max_bucket_distance``, the
sign in the upper half); layer 0's ``rel_attn_embed`` turns the buckets into a
per-head bias ``[1, heads, frames, frames]`` that every layer reuses. Each layer
scales that bias per query by a gate computed from its own input
(``gru_rel_pos_linear``, ``gru_rel_pos_const``). The feature encoder, the layers'
post-LN/pre-LN order and the heads are wav2vec2's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, Linear, bidirectional_attention
from mobius.errors import ConfigError
from mobius_audio.models.wav2vec2 import (
    Wav2Vec2Attention,
    Wav2Vec2Config,
    Wav2Vec2Encoder,
    Wav2Vec2EncoderLayer,
    Wav2Vec2ForCTC,
    Wav2Vec2Model,
)


@dataclass
class WavLMConfig(Wav2Vec2Config):
    num_buckets: int = 320
    max_bucket_distance: int = 800

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if hf_config.num_buckets < 4 or hf_config.num_hidden_layers < 1:
            raise ConfigError(
                f"wavlm needs num_buckets >= 4 and a layer (got {hf_config.num_buckets}, "
                f"{hf_config.num_hidden_layers})"
            )
        return dict(
            super().hf_fields(hf_config),
            feat_proj_layer_norm=True,  # WavLM's projection always normalises
            num_buckets=hf_config.num_buckets,
            max_bucket_distance=hf_config.max_bucket_distance,
        )


def relative_position_buckets(op, frames, num_buckets: int, max_distance: int):
    """int64 ``[frames, frames]``: the bucket of ``key - query``, as transformers' float32 arithmetic.

    ``frames`` is a 1-D int64 tensor of one element.
    """
    half = num_buckets // 2  # buckets per sign
    exact = half // 2  # offsets below this get a bucket each
    positions = op.Range(
        op.Constant(value_int=0), op.Squeeze(frames, [0]), op.Constant(value_int=1)
    )
    offsets = op.Sub(op.Unsqueeze(positions, [0]), op.Unsqueeze(positions, [1]))  # key - query
    signed = op.Mul(op.Cast(op.Greater(offsets, 0), to=ir.DataType.INT64), half)
    distance = op.Abs(offsets)

    def f32(value):
        return op.Constant(value=ir.tensor(np.array(value, dtype=np.float32)))

    # exact + trunc(log(d / exact) / log(max / exact) * (half - exact)), in transformers' order;
    # d clamped at ``exact`` only to keep log finite where the exact branch is taken anyway
    far = op.Cast(op.Max(distance, exact), to=ir.DataType.FLOAT)
    far = op.Div(op.Log(op.Div(far, f32(exact))), f32(math.log(max_distance / exact)))
    far = op.Add(f32(exact), op.Mul(far, f32(half - exact)))
    far = op.Min(op.Cast(far, to=ir.DataType.INT64), half - 1)
    return op.Add(signed, op.Where(op.Less(distance, exact), distance, far))


class WavLMAttention(Wav2Vec2Attention):
    """Self-attention plus the relative position bias, gated per head and query.

    ``bias`` is a :class:`WavLMBias`; the attention that holds ``rel_attn_embed``
    (layer 0's) fills its ``position`` for the layers after it.
    """

    def __init__(self, config: WavLMConfig) -> None:
        super().__init__(config)
        head_dim = config.hidden_size // self.num_heads
        self.head_dim = head_dim
        self.gru_rel_pos_const = nn.Parameter([1, self.num_heads, 1, 1])
        self.gru_rel_pos_linear = Linear(head_dim, 8, True)
        self.rel_attn_embed = None  # set on layer 0 by the encoder

    def gate(self, op, x):
        """``[batch, heads, frames, 1]``: ``a * (b * const - 1) + 2`` from the per-head input."""
        heads = op.Transpose(
            op.Reshape(x, [0, 0, self.num_heads, self.head_dim]), perm=[0, 2, 1, 3]
        )
        proj = self.gru_rel_pos_linear(op, heads)  # [batch, heads, frames, 8]
        proj = op.ReduceSum(op.Reshape(proj, [0, 0, 0, 2, 4]), [-1], keepdims=0)
        # a, b: each [batch, heads, frames, 1]
        a, b = op.Split(op.Sigmoid(proj), num_outputs=2, axis=-1, _outputs=2)
        one = op.CastLike(op.Constant(value=ir.tensor(np.array(1, np.float32))), x)
        two = op.CastLike(op.Constant(value=ir.tensor(np.array(2, np.float32))), x)
        return op.Add(op.Mul(a, op.Sub(op.Mul(b, self.gru_rel_pos_const), one)), two)

    def forward(self, op, x, bias):
        if self.rel_attn_embed is not None:
            values = self.rel_attn_embed(op, bias.buckets)  # [frames, frames, heads]
            bias.position = op.Unsqueeze(op.Transpose(values, perm=[2, 0, 1]), [0])
        gated = op.Add(op.Mul(self.gate(op, x), bias.position), bias.padding)  # [b, h, f, f]
        q, k, v = self.q_proj(op, x), self.k_proj(op, x), self.v_proj(op, x)
        return self.out_proj(
            op, bidirectional_attention(op, q, k, v, gated, self.num_heads, self.scale)
        )


class WavLMBias:
    """What each WavLM attention gets: the padding bias, the buckets, and layer 0's position bias."""

    def __init__(self, padding, buckets) -> None:
        self.padding = padding  # [batch, 1, frames, frames]
        self.buckets = buckets  # int64 [frames, frames]
        self.position = None  # [1, heads, frames, frames], set by layer 0


class WavLMEncoderLayer(Wav2Vec2EncoderLayer):
    attention_class = WavLMAttention


class WavLMEncoder(Wav2Vec2Encoder):
    layer_class = WavLMEncoderLayer

    def __init__(self, config: WavLMConfig) -> None:
        super().__init__(config)
        # as in transformers, only the first layer holds the bucket embedding
        self.layers[0].attention.rel_attn_embed = Embedding(
            config.num_buckets, config.num_attention_heads
        )
        self.num_buckets, self.max_distance = config.num_buckets, config.max_bucket_distance

    def attention_bias(self, op, x, frame_mask):
        """The padding bias and the relative-position buckets of the padded frame count."""
        buckets = relative_position_buckets(
            op, op.Shape(x, start=1, end=2), self.num_buckets, self.max_distance
        )
        return WavLMBias(super().attention_bias(op, x, frame_mask), buckets)


class WavLMModel(Wav2Vec2Model):
    encoder_class = WavLMEncoder


class WavLMForCTC(Wav2Vec2ForCTC):
    config_class = WavLMConfig
    base_model_prefix = "wavlm"
    model_class = WavLMModel


MODEL_TYPES = {"wavlm": WavLMForCTC}
