"""Conditional DETR: DETR whose decoder queries carry a reference point, so cross-attention
matches "where" apart from "what".

Each query's learned embedding gives a reference point (``ref_point_head``, a sigmoid);
its sine embedding, scaled per layer by ``query_scale`` of the states (not in the first
layer), is concatenated per head with the content query, and the pixels' positions with
the content keys (heads of twice the size). Self-attention projects content and
positions apart and adds them. The box head predicts offsets from the reference point;
the classes have no "no object" entry (a sigmoid each). Checkpoint names are the
hub's: the projections sit on the layer (``layers.0.sa_qcontent_proj``,
``layers.0.ca_qpos_sine_proj``; ``ca_qpos_proj`` in the first layer only).
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import LayerNorm, Linear
from mobius_vision.models._detr import (
    DetrConfig,
    DetrDecoder,
    DetrForObjectDetection,
    DetrMLPPredictionHead,
    DetrModel,
    FeedForward,
    float_constant,
    inverse_sigmoid,
    per_head_concat,
    sine_of_points,
)


@dataclass
class ConditionalDetrConfig(DetrConfig):
    """DETR's sizes (Conditional DETR's config has the same fields; 300 queries on the hub)."""


class OutProjection(nn.Module):
    """``self_attn`` / ``encoder_attn``: only their output projection is a module of its own."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.out_proj = Linear(hidden_size, hidden_size, bias=True)

    def forward(self, op, x):
        return self.out_proj(op, x)


class ConditionalDetrDecoderLayer(FeedForward):
    """Self-attention (content and position projected apart), conditional cross-attention,
    feed-forward; each post-normed."""

    def __init__(self, config: ConditionalDetrConfig, first: bool) -> None:
        super().__init__(config, config.decoder_ffn_dim)
        d = config.d_model
        self.num_heads = config.decoder_attention_heads
        self.head_dim = d // self.num_heads
        for name in ("sa_qcontent_proj", "sa_qpos_proj", "sa_kcontent_proj", "sa_kpos_proj"):
            setattr(self, name, Linear(d, d, bias=True))
        self.sa_v_proj = Linear(d, d, bias=True)
        self.self_attn = OutProjection(d)
        self.self_attn_layer_norm = LayerNorm(d)
        self.ca_qcontent_proj = Linear(d, d, bias=True)
        self.ca_qpos_proj = Linear(d, d, bias=True) if first else None
        self.ca_kcontent_proj = Linear(d, d, bias=True)
        self.ca_kpos_proj = Linear(d, d, bias=True)
        self.ca_v_proj = Linear(d, d, bias=True)
        self.ca_qpos_sine_proj = Linear(d, d, bias=True)
        self.encoder_attn = OutProjection(d)
        self.encoder_attn_layer_norm = LayerNorm(d)

    def attention(self, op, q, k, v, bias, head_size: int):
        heads = self.num_heads
        return op.Attention(
            q, k, v, bias, q_num_heads=heads, kv_num_heads=heads, scale=head_size**-0.5
        )

    def self_attention(self, op, hidden, query_positions):
        q = op.Add(self.sa_qcontent_proj(op, hidden), self.sa_qpos_proj(op, query_positions))
        k = op.Add(self.sa_kcontent_proj(op, hidden), self.sa_kpos_proj(op, query_positions))
        out = self.attention(op, q, k, self.sa_v_proj(op, hidden), None, self.head_dim)
        return self.self_attn(op, out)

    def cross_attention(self, op, hidden, memory, bias, query_positions, memory_positions, sine):
        q = self.ca_qcontent_proj(op, hidden)
        k = self.ca_kcontent_proj(op, memory)
        key_positions = self.ca_kpos_proj(op, memory_positions)
        if self.ca_qpos_proj is not None:  # the first layer adds the positions to the content
            q = op.Add(q, self.ca_qpos_proj(op, query_positions))
            k = op.Add(k, key_positions)
        q = per_head_concat(op, q, self.ca_qpos_sine_proj(op, sine), self.num_heads)
        k = per_head_concat(op, k, key_positions, self.num_heads)
        v = self.ca_v_proj(op, memory)
        return self.encoder_attn(op, self.attention(op, q, k, v, bias, 2 * self.head_dim))

    def forward(self, op, hidden, memory, bias, query_positions, memory_positions, sine):
        hidden = self.self_attn_layer_norm(
            op, op.Add(hidden, self.self_attention(op, hidden, query_positions))
        )
        attended = self.cross_attention(
            op, hidden, memory, bias, query_positions, memory_positions, sine
        )
        hidden = self.encoder_attn_layer_norm(op, op.Add(hidden, attended))
        return self.feed_forward(op, hidden)


class ConditionalDetrDecoder(DetrDecoder):
    """The layers over zero queries from their reference points: ``(states, reference points
    [batch, queries, 2])``."""

    def __init__(self, config: ConditionalDetrConfig) -> None:
        super().__init__(config)
        d = config.d_model
        self.query_scale = DetrMLPPredictionHead(d, d, d, 2)
        self.ref_point_head = DetrMLPPredictionHead(d, d, 2, 2)

    def make_layer(self, config: ConditionalDetrConfig, index: int) -> nn.Module:
        return ConditionalDetrDecoderLayer(config, first=index == 0)

    def forward(self, op, queries, memory, memory_bias, query_positions, memory_positions):
        reference = op.Sigmoid(self.ref_point_head(op, query_positions))
        sine = sine_of_points(op, reference, self.config.d_model // 2, 2)
        hidden = queries
        for index, layer in enumerate(self.layers):
            scaled = sine if index == 0 else op.Mul(sine, self.query_scale(op, hidden))
            hidden = layer(
                op, hidden, memory, memory_bias, query_positions, memory_positions, scaled
            )
        return self.layernorm(op, hidden), reference


class ConditionalDetrModel(DetrModel):
    decoder_class = ConditionalDetrDecoder


class ConditionalDetrForObjectDetection(DetrForObjectDetection):
    """Sigmoid class logits (``num_labels``, no "no object"); boxes are offsets of the
    reference points."""

    config_class = ConditionalDetrConfig
    model_class = ConditionalDetrModel

    def num_classes(self) -> int:
        return self.config.num_labels

    @property
    def ignored(self) -> tuple[str, ...]:
        """With one decoder layer, ``query_scale`` (applied from the second on) is unused."""
        unused = ("model.decoder.query_scale.*",) if self.config.decoder_layers == 1 else ()
        return super().ignored + unused

    def predict(self, op, decoded):
        hidden, reference = decoded
        logits = self.class_labels_classifier(op, hidden)
        offsets = self.bbox_predictor(op, hidden)
        zeros = op.Mul(reference, float_constant(op, 0.0, reference))
        shift = op.Concat(inverse_sigmoid(op, reference), zeros, axis=-1)  # (cx, cy) only
        return {"logits": logits, "pred_boxes": op.Sigmoid(op.Add(offsets, shift))}


MODEL_TYPES = {"conditional_detr": ConditionalDetrForObjectDetection}
