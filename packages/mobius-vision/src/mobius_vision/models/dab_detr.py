"""DAB-DETR: DETR whose queries are learned anchor boxes ``(x, y, w, h)``, refined layer by layer.

The encoder scales the pixels' positions per layer (``query_scale`` of the states);
its sine positions have a temperature per axis. Each decoder layer derives the query
positions from the sine embedding of its anchors (``ref_point_head``), modulates the
sine by the anchors' width and height against the predicted ones (``ref_anchor_head``),
attends as Conditional DETR does (heads of twice the size in cross-attention), and moves
the anchors by the box head (``bbox_embed``: the checkpoint ties it to ``bbox_predictor``).
Classes are a sigmoid each (no "no object"); boxes are offsets of the last layer's input
anchors. The activation is a PReLU by default (a learned slope, ``activation_fn.weight``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Embedding, LayerNorm, Linear
from mobius.errors import ConfigError
from mobius_vision.models._conv import activation
from mobius_vision.models._detr import (
    DetrConfig,
    DetrDecoder,
    DetrEncoder,
    DetrEncoderLayer,
    DetrForObjectDetection,
    DetrMLPPredictionHead,
    DetrModel,
    FeedForward,
    detection_backbone,
    float_constant,
    inverse_sigmoid,
    per_head_concat,
    sine_of_points,
    sine_positions,
)

#: DAB-DETR's anchors are boxes: (x, y, w, h).
ANCHOR_COORDINATES = 4


@dataclass
class DabDetrConfig(DetrConfig):
    temperature_height: float = 20
    temperature_width: float = 20
    keep_query_pos: bool = False
    normalize_before: bool = False

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if hf_config.query_dim != ANCHOR_COORDINATES:
            raise ConfigError(f"dab-detr query_dim {hf_config.query_dim} is not 4 (x, y, w, h)")
        if hf_config.num_patterns:
            raise ConfigError("dab-detr with num_patterns (pattern embeddings) is not supported")
        scale = hf_config.sine_position_embedding_scale
        if scale is not None:
            raise ConfigError("dab-detr with a sine_position_embedding_scale is not supported")
        backbone_type, backbone = detection_backbone(hf_config.backbone_config)
        fields = dict(
            model_type=hf_config.model_type,
            backbone_type=backbone_type,
            backbone=backbone,
            timm_backbone=backbone_type != getattr(hf_config.backbone_config, "model_type", None),
            num_channels=int(backbone.num_channels),
            num_labels=int(hf_config.num_labels),
            num_queries=int(hf_config.num_queries),
            d_model=int(hf_config.hidden_size),
            encoder_layers=int(hf_config.encoder_layers),
            decoder_layers=int(hf_config.decoder_layers),
            encoder_attention_heads=int(hf_config.encoder_attention_heads),
            decoder_attention_heads=int(hf_config.decoder_attention_heads),
            encoder_ffn_dim=int(hf_config.encoder_ffn_dim),
            decoder_ffn_dim=int(hf_config.decoder_ffn_dim),
            activation_function=hf_config.activation_function,
            temperature_height=float(hf_config.temperature_height),
            temperature_width=float(hf_config.temperature_width),
            keep_query_pos=bool(hf_config.keep_query_pos),
            normalize_before=bool(hf_config.normalize_before),
        )
        return cls.checked(fields)


class PReLU(nn.Module):
    """``torch.nn.PReLU()``: one learned slope for the negative part."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter([1])

    def forward(self, op, x):
        return op.PRelu(x, self.weight)


def activation_module(name: str) -> nn.Module | None:
    """A module for the activations with parameters (``prelu``), else None."""
    return PReLU() if name == "prelu" else None


class LearnedActivation:
    """Mixed into a :class:`FeedForward`: its activation may have a parameter (``activation_fn``)."""

    def make_activation(self, name: str) -> None:
        self.activation_fn = activation_module(name)
        self.act = activation(None if self.activation_fn is not None else name)

    def update(self, op, hidden):
        hidden = self.fc1(op, hidden)
        hidden = self.activation_fn(op, hidden) if self.activation_fn else self.act(op, hidden)
        return self.fc2(op, hidden)


class DabDetrEncoderLayer(LearnedActivation, DetrEncoderLayer):
    """DETR's encoder layer with DAB-DETR's activation."""


class DabDetrEncoder(DetrEncoder):
    """DETR's layers, the positions scaled per layer by ``query_scale`` of the states; a final
    ``norm`` with ``normalize_before``."""

    layer_class = DabDetrEncoderLayer

    def __init__(self, config: DabDetrConfig) -> None:
        super().__init__(config)
        d = config.d_model
        self.query_scale = DetrMLPPredictionHead(d, d, d, 2)
        self.norm = LayerNorm(d) if config.normalize_before else None

    def forward(self, op, hidden, bias, positions):
        for layer in self.layers:
            scaled = op.Mul(positions, self.query_scale(op, hidden))
            hidden = layer(op, hidden, bias, scaled)
        return hidden if self.norm is None else self.norm(op, hidden)


class OutputProjection(nn.Module):
    """``self_attn`` / ``cross_attn`` inside the blocks: the output projection only."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.output_proj = Linear(hidden_size, hidden_size, bias=True)

    def forward(self, op, x):
        return self.output_proj(op, x)


def attention(op, q, k, v, bias, num_heads: int, head_size: int):
    return op.Attention(
        q, k, v, bias, q_num_heads=num_heads, kv_num_heads=num_heads, scale=head_size**-0.5
    )


class DabDetrSelfAttentionBlock(nn.Module):
    """Content and position projected apart and added; residual, post-norm."""

    def __init__(self, config: DabDetrConfig) -> None:
        super().__init__()
        d = config.d_model
        for part in ("query_content", "query_pos", "key_content", "key_pos", "value"):
            setattr(self, f"self_attn_{part}_proj", Linear(d, d, bias=True))
        self.self_attn = OutputProjection(d)
        self.self_attn_layer_norm = LayerNorm(d)
        self.num_heads = config.decoder_attention_heads
        self.head_size = d // self.num_heads

    def forward(self, op, hidden, query_positions):
        q = op.Add(
            self.self_attn_query_content_proj(op, hidden),
            self.self_attn_query_pos_proj(op, query_positions),
        )
        k = op.Add(
            self.self_attn_key_content_proj(op, hidden),
            self.self_attn_key_pos_proj(op, query_positions),
        )
        v = self.self_attn_value_proj(op, hidden)
        out = attention(op, q, k, v, None, self.num_heads, self.head_size)
        return self.self_attn_layer_norm(op, op.Add(hidden, self.self_attn(op, out)))


class DabDetrCrossAttentionBlock(nn.Module):
    """Conditional cross-attention: content and sine halves per head; the query positions
    added in the first layer (every layer with ``keep_query_pos``)."""

    def __init__(self, config: DabDetrConfig, first: bool) -> None:
        super().__init__()
        d = config.d_model
        for part in ("query_content", "key_content", "key_pos", "value", "query_pos_sine"):
            setattr(self, f"cross_attn_{part}_proj", Linear(d, d, bias=True))
        with_positions = first or config.keep_query_pos
        self.cross_attn_query_pos_proj = Linear(d, d, bias=True) if with_positions else None
        self.cross_attn = OutputProjection(d)
        self.cross_attn_layer_norm = LayerNorm(d)
        self.num_heads = config.decoder_attention_heads
        self.head_size = d // self.num_heads

    def forward(self, op, hidden, memory, bias, query_positions, memory_positions, sine):
        q = self.cross_attn_query_content_proj(op, hidden)
        k = self.cross_attn_key_content_proj(op, memory)
        v = self.cross_attn_value_proj(op, memory)
        key_positions = self.cross_attn_key_pos_proj(op, memory_positions)
        if self.cross_attn_query_pos_proj is not None:
            q = op.Add(q, self.cross_attn_query_pos_proj(op, query_positions))
            k = op.Add(k, key_positions)
        q = per_head_concat(op, q, self.cross_attn_query_pos_sine_proj(op, sine), self.num_heads)
        k = per_head_concat(op, k, key_positions, self.num_heads)
        out = attention(op, q, k, v, bias, self.num_heads, 2 * self.head_size)
        return self.cross_attn_layer_norm(op, op.Add(hidden, self.cross_attn(op, out)))


class DabDetrFeedForwardBlock(LearnedActivation, FeedForward):
    """The decoder layer's ``mlp``: fc1, activation, fc2, residual, ``final_layer_norm``."""

    def __init__(self, config: DabDetrConfig) -> None:
        super().__init__(config, config.decoder_ffn_dim)

    def forward(self, op, hidden):
        return self.feed_forward(op, hidden)


class DabDetrDecoderLayer(nn.Module):
    def __init__(self, config: DabDetrConfig, first: bool) -> None:
        super().__init__()
        self.self_attn = DabDetrSelfAttentionBlock(config)
        self.cross_attn = DabDetrCrossAttentionBlock(config, first)
        self.mlp = DabDetrFeedForwardBlock(config)

    def forward(self, op, hidden, memory, bias, query_positions, memory_positions, sine):
        hidden = self.self_attn(op, hidden, query_positions)
        hidden = self.cross_attn(op, hidden, memory, bias, query_positions, memory_positions, sine)
        return self.mlp(op, hidden)


class DabDetrDecoder(DetrDecoder):
    """The layers over zero queries and their anchors: ``(states, last layer's input anchors)``."""

    def __init__(self, config: DabDetrConfig) -> None:
        super().__init__(config)
        d = config.d_model
        self.query_scale = DetrMLPPredictionHead(d, d, d, 2)
        self.ref_point_head = DetrMLPPredictionHead(ANCHOR_COORDINATES // 2 * d, d, d, 2)
        self.ref_anchor_head = DetrMLPPredictionHead(d, d, 2, 2)
        self.bbox_embed = DetrMLPPredictionHead(d, d, 4, 3)

    def make_layer(self, config: DabDetrConfig, index: int) -> nn.Module:
        return DabDetrDecoderLayer(config, first=index == 0)

    def modulated_sine(self, op, hidden, anchors, sine, first: bool):
        """The anchors' ``(y, x)`` sine scaled by ``query_scale`` (not in the first layer), its
        ``x`` half by predicted / anchor width and ``y`` half by predicted / anchor height."""
        d = self.config.d_model
        sine = op.Slice(sine, [0], [d], [2])
        if not first:
            sine = op.Mul(sine, self.query_scale(op, hidden))
        predicted = op.Sigmoid(self.ref_anchor_head(op, hidden))  # [batch, queries, (w, h)]
        size = op.Slice(anchors, [2], [4], [2])
        ratio = op.Div(predicted, size)  # (w, h)
        y_half, x_half = op.Slice(sine, [0], [d // 2], [2]), op.Slice(sine, [d // 2], [d], [2])
        height_ratio, width_ratio = op.Slice(ratio, [1], [2], [2]), op.Slice(ratio, [0], [1], [2])
        return op.Concat(op.Mul(y_half, height_ratio), op.Mul(x_half, width_ratio), axis=-1)

    def forward(self, op, queries, memory, memory_bias, anchor_logits, memory_positions):
        anchors = op.Sigmoid(anchor_logits)
        hidden = queries
        last = len(self.layers) - 1
        for index, layer in enumerate(self.layers):
            sine = sine_of_points(op, anchors, self.config.d_model // 2, ANCHOR_COORDINATES)
            query_positions = self.ref_point_head(op, sine)
            scaled = self.modulated_sine(op, hidden, anchors, sine, first=index == 0)
            hidden = layer(
                op, hidden, memory, memory_bias, query_positions, memory_positions, scaled
            )
            if index < last:  # the last layer's move is not used by the output
                moved = op.Add(self.bbox_embed(op, hidden), inverse_sigmoid(op, anchors))
                anchors = op.Sigmoid(moved)
        return self.layernorm(op, hidden), anchors


class DabDetrModel(DetrModel):
    """The anchors (``query_refpoint_embeddings``, before the sigmoid) stand for DETR's query
    embeddings; the pixels' sine positions have a temperature per axis."""

    encoder_class = DabDetrEncoder
    decoder_class = DabDetrDecoder

    def __init__(self, config: DabDetrConfig) -> None:
        super().__init__(config)
        self.query_position_embeddings = None
        self.query_refpoint_embeddings = Embedding(config.num_queries, ANCHOR_COORDINATES)

    def spatial_positions(self, op, feature_map, mask):
        config = self.config
        temperatures = (config.temperature_height, config.temperature_width)
        return sine_positions(op, mask, config.d_model // 2, feature_map, temperatures)

    def query_table(self) -> nn.Module:
        return self.query_refpoint_embeddings

    def zero_queries(self, op, anchors):
        """``[batch, queries, d_model]`` zeros (the anchors are 4 wide)."""
        d = self.config.d_model
        shape = op.Concat(op.Shape(anchors, start=0, end=2), op.Constant(value_ints=[d]), axis=0)
        return op.Expand(float_constant(op, 0.0, anchors), shape)


class DabDetrForObjectDetection(DetrForObjectDetection):
    """Sigmoid class logits (``class_embed``, ``num_labels``); boxes are offsets of the last
    layer's input anchors."""

    config_class = DabDetrConfig
    model_class = DabDetrModel

    def __init__(self, config: DabDetrConfig) -> None:
        super().__init__(config)
        self.class_labels_classifier = None
        self.class_embed = Linear(config.d_model, config.num_labels, bias=True)

    def num_classes(self) -> int:
        return self.config.num_labels

    @property
    def ignored(self) -> tuple[str, ...]:
        """With one decoder layer, ``query_scale`` and the anchor moves are unused."""
        if self.config.decoder_layers > 1:
            return super().ignored
        return super().ignored + ("model.decoder.query_scale.*", "model.decoder.bbox_embed.*")

    def sanitize(self, weights: dict) -> dict:
        """The decoder's ``bbox_embed`` is ``bbox_predictor`` (transformers ties them and saves
        only ``bbox_predictor``)."""
        weights = super().sanitize(weights)
        tied = "model.decoder.bbox_embed."
        extra = {
            tied + k.removeprefix("bbox_predictor."): v
            for k, v in weights.items()
            if k.startswith("bbox_predictor.")
            and tied + k.removeprefix("bbox_predictor.") not in weights
        }
        return {**weights, **extra}

    def predict(self, op, decoded):
        hidden, anchors = decoded
        logits = self.class_embed(op, hidden)
        boxes = op.Add(self.bbox_predictor(op, hidden), inverse_sigmoid(op, anchors))
        return {"logits": logits, "pred_boxes": op.Sigmoid(boxes)}


MODEL_TYPES = {"dab-detr": DabDetrForObjectDetection}
