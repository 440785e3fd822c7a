"""Wav2Vec2-BERT: conformer blocks over stacked fbank frames (``input_features``), no conv encoder.

The input is SeamlessM4T's feature extractor output ``[batch, frames, 160]`` (80
mel bins, two frames stacked), masked per frame; a LayerNorm + projection feeds
the Wav2Vec2-Conformer blocks with three changes: every LayerNorm uses
``layer_norm_eps``, the conv module zeroes padded frames and runs a causal
(left-padded) depthwise conv followed by a LayerNorm instead of BatchNorm, and
attention may also take ``relative_key`` positions (a learned embedding of the
clamped distance, dotted with the query). No final encoder norm. The rotary
``inv_freq`` is not saved; it is rebuilt from ``rotary_embedding_base``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, LayerNorm, Linear
from mobius.errors import ConfigError
from mobius_audio.models.wav2vec2 import Conv1d, TimeLayerNorm
from mobius_audio.models.wav2vec2_conformer import (
    Wav2Vec2ConformerConfig,
    Wav2Vec2ConformerConvolutionModule,
    Wav2Vec2ConformerEncoder,
    Wav2Vec2ConformerEncoderLayer,
    Wav2Vec2ConformerForCTC,
    Wav2Vec2ConformerSelfAttention,
)


@dataclass
class Wav2Vec2BertConfig(Wav2Vec2ConformerConfig):
    feature_projection_input_dim: int = 160
    left_max_position_embeddings: int = 64
    right_max_position_embeddings: int = 8
    built_positions = (None, "relative", "rotary", "relative_key")

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if getattr(hf_config, "add_adapter", False):
            raise ConfigError("wav2vec2-bert adapters (add_adapter) are not built")
        fields = cls.conformer_fields(hf_config)
        return dict(
            fields,
            model_type=hf_config.model_type,
            hidden_size=hf_config.hidden_size,
            intermediate_size=hf_config.intermediate_size,
            num_hidden_layers=hf_config.num_hidden_layers,
            num_attention_heads=hf_config.num_attention_heads,
            hidden_act=hf_config.hidden_act,
            layer_norm_eps=hf_config.layer_norm_eps,
            conformer_norm_eps=hf_config.layer_norm_eps,
            feature_projection_input_dim=hf_config.feature_projection_input_dim,
            left_max_position_embeddings=hf_config.left_max_position_embeddings,
            right_max_position_embeddings=hf_config.right_max_position_embeddings,
            vocab_size=hf_config.vocab_size,
            num_labels=int(getattr(hf_config, "num_labels", 2) or 2),
            classifier_proj_size=hf_config.classifier_proj_size,
            use_weighted_layer_sum=bool(hf_config.use_weighted_layer_sum),
            **cls.xvector_fields(hf_config),
            head=cls.head_of(hf_config),
        )


class CausalConv1d(Conv1d):
    """A Conv1d padded ``kernel - 1`` frames on the left only."""

    def forward(self, op, x):  # [batch, channels, frames]
        return op.Conv(
            x, self.weight, kernel_shape=[self.kernel], pads=[self.kernel - 1, 0], group=self.groups
        )


class Wav2Vec2BertConvolutionModule(Wav2Vec2ConformerConvolutionModule):
    def build_depthwise(self, config: Wav2Vec2BertConfig) -> None:
        d, k = config.hidden_size, config.conv_depthwise_kernel_size
        self.depthwise_conv = CausalConv1d(d, d, k, bias=False, groups=d)
        self.depthwise_layer_norm = TimeLayerNorm(d, config.layer_norm_eps)

    def depthwise(self, op, x):  # [batch, hidden, frames]
        return self.depthwise_layer_norm(op, self.depthwise_conv(op, x))

    def mask_padding(self, op, x, frame_mask):
        """Padded frames 0, so they do not leak into the depthwise conv."""
        zero = op.CastLike(op.Constant(value=ir.tensor(np.array(0, np.float32))), x)
        return op.Where(op.Unsqueeze(frame_mask, [2]), x, zero)


class Wav2Vec2BertSelfAttention(Wav2Vec2ConformerSelfAttention):
    """Adds ``relative_key``: the query dotted with a learned embedding of the clamped distance."""

    def __init__(self, config: Wav2Vec2BertConfig) -> None:
        super().__init__(config)
        if self.kind == "relative_key":
            self.left = config.left_max_position_embeddings
            self.right = config.right_max_position_embeddings
            self.distance_embedding = Embedding(self.left + self.right + 1, self.head_size)

    def position_bias(self, op, q, positions):
        if self.kind != "relative_key":
            return super().position_bias(op, q, positions)
        frames = op.Squeeze(op.Shape(q, start=1, end=2), [0])
        index = op.Range(op.Constant(value_int=0), frames, op.Constant(value_int=1))
        distance = op.Sub(op.Unsqueeze(index, [0]), op.Unsqueeze(index, [1]))  # key - query
        left, right = op.Constant(value_int=self.left), op.Constant(value_int=self.right)
        distance = op.Min(op.Max(distance, op.Neg(left)), right)
        table = self.distance_embedding(op, op.Add(distance, left))  # [f(q), f(k), head]
        per_query = op.Transpose(self.heads(op, q), perm=[2, 0, 1, 3])  # [f(q), b, h, head]
        scores = op.MatMul(per_query, op.Unsqueeze(op.Transpose(table, perm=[0, 2, 1]), [1]))
        scores = op.Transpose(scores, perm=[1, 2, 0, 3])  # [b, h, f(q), f(k)]
        scale = op.CastLike(op.Constant(value=ir.tensor(np.array(self.scale, np.float32))), q)
        return q, op.Mul(scores, scale)


class Wav2Vec2BertEncoderLayer(Wav2Vec2ConformerEncoderLayer):
    attention_class = Wav2Vec2BertSelfAttention
    conv_module_class = Wav2Vec2BertConvolutionModule


class Wav2Vec2BertEncoder(Wav2Vec2ConformerEncoder):
    layer_class = Wav2Vec2BertEncoderLayer
    inv_freq_saved = False
    final_norm = False


class Wav2Vec2BertFeatureProjection(nn.Module):
    def __init__(self, config: Wav2Vec2BertConfig) -> None:
        super().__init__()
        dim = config.feature_projection_input_dim
        self.layer_norm = LayerNorm(dim, config.layer_norm_eps)
        self.projection = Linear(dim, config.hidden_size, True)

    def forward(self, op, x):
        return self.projection(op, self.layer_norm(op, x))


class Wav2Vec2BertModel(nn.Module):
    def __init__(self, config: Wav2Vec2BertConfig) -> None:
        super().__init__()
        self.feature_projection = Wav2Vec2BertFeatureProjection(config)
        self.encoder = Wav2Vec2BertEncoder(config)

    def forward(self, op, input_features, attention_mask):
        mask = op.Cast(attention_mask, to=ir.DataType.BOOL)  # already per frame
        hidden, states = self.encoder(op, self.feature_projection(op, input_features), mask)
        return hidden, states, mask


class Wav2Vec2BertForCTC(Wav2Vec2ConformerForCTC):
    """Takes ``input_features [batch, frames, feature_projection_input_dim]`` and its frame mask."""

    config_class = Wav2Vec2BertConfig
    base_model_prefix = "wav2vec2_bert"
    model_class = Wav2Vec2BertModel
    unused_weights = ()

    def input_shapes(self) -> dict[str, list]:
        """The graph's inputs (``AudioFeatureExtractionTask``): fbank frames, not samples."""
        features = ["batch", "frames", self.config.feature_projection_input_dim]
        return {"input_features": features, "attention_mask": ["batch", "frames"]}


MODEL_TYPES = {"wav2vec2-bert": Wav2Vec2BertForCTC}
