"""What the DETR family shares: a convolutional backbone's last map, a transformer encoder over
its pixels, a decoder over learned object queries, and class and box heads.

Module names follow ``DetrForObjectDetection`` checkpoints as the hub holds them and
transformers saves them (``model.backbone.conv_encoder.model...``, ``model.input_projection``,
``model.encoder.layers.0.self_attn.out_proj``, ``model.encoder.layers.0.fc1``,
``model.decoder.layernorm``, ``class_labels_classifier``, ``bbox_predictor.layers.0``),
so weights map by identity. The backbone is whatever mobius registers as the
``backbone_config``'s ``backbone_class`` (:mod:`._backbone`): ResNet for DETR's
checkpoints. Conditional DETR, Table Transformer and DAB-DETR subclass the pieces
they change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, LayerNorm, Linear, padding_bias
from mobius.errors import ConfigError
from mobius_vision.models._backbone import backbone
from mobius_vision.models._backbone_config import backbone_config
from mobius_vision.models._conv import BATCHNORM_COUNTERS, Conv2d, activation
from mobius_vision.models.resnet import ResNetBackboneConfig, timm_to_transformers_name
from mobius_vision.tasks.object_detection import DetectionModel

#: transformers' DetrSinePositionEmbedding: temperature, and the scale of normalised positions.
SINE_TEMPERATURE = 10000
SINE_SCALE = 2 * math.pi
#: transformers' model_type of a timm backbone config (``use_timm_backbone``).
TIMM_BACKBONE = "timm_backbone"
#: Where the backbone's tensors sit in a checkpoint.
BACKBONE_PREFIX = "model.backbone.conv_encoder.model."
#: The learned position tables' rows (transformers' DetrLearnedPositionEmbedding).
LEARNED_POSITIONS = 50


def detection_backbone(hf_backbone_config: Any) -> tuple[str, Any]:
    """``(model_type, config)`` of the backbone a detection config's ``backbone_config`` names;
    a timm ResNet (``use_timm_backbone``, the hub's DETR checkpoints) reads as transformers'
    ResNet, the same network."""
    model_type = getattr(hf_backbone_config, "model_type", None)
    if model_type == TIMM_BACKBONE:
        return "resnet", ResNetBackboneConfig.from_timm(hf_backbone_config)
    if not isinstance(model_type, str):
        raise ConfigError("the detection config's backbone_config names no model_type")
    config = backbone_config(hf_backbone_config)
    if not hasattr(config, "feature_channels"):  # the input projection's width comes from it
        raise ConfigError(f"mobius's {model_type} backbone does not say its maps' channels")
    return model_type, config


@dataclass
class DetrConfig:
    """DETR's sizes, its backbone's config, and the image it takes."""

    model_type: str
    backbone_type: str
    backbone: Any
    num_channels: int = 3
    num_labels: int = 91
    num_queries: int = 100
    d_model: int = 256
    encoder_layers: int = 6
    decoder_layers: int = 6
    encoder_attention_heads: int = 8
    decoder_attention_heads: int = 8
    encoder_ffn_dim: int = 2048
    decoder_ffn_dim: int = 2048
    activation_function: str = "relu"
    position_embedding_type: str = "sine"
    #: The checkpoint's backbone tensors have timm's names (mapped in ``sanitize``).
    timm_backbone: bool = False

    @classmethod
    def from_hf(cls, hf_config: Any) -> DetrConfig:
        """Normalise a transformers config object."""
        return cls(**cls.hf_fields(hf_config))

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        """The constructor arguments read from ``hf_config``; variants add to this dict."""
        backbone_type, backbone = detection_backbone(hf_config.backbone_config)
        position = hf_config.position_embedding_type
        if position not in ("sine", "learned"):
            raise ConfigError(f"position_embedding_type {position!r} is not sine or learned")
        fields = dict(
            model_type=hf_config.model_type,
            backbone_type=backbone_type,
            backbone=backbone,
            num_channels=int(hf_config.num_channels),
            num_labels=int(hf_config.num_labels),
            num_queries=int(hf_config.num_queries),
            d_model=int(hf_config.d_model),
            encoder_layers=int(hf_config.encoder_layers),
            decoder_layers=int(hf_config.decoder_layers),
            encoder_attention_heads=int(hf_config.encoder_attention_heads),
            decoder_attention_heads=int(hf_config.decoder_attention_heads),
            encoder_ffn_dim=int(hf_config.encoder_ffn_dim),
            decoder_ffn_dim=int(hf_config.decoder_ffn_dim),
            activation_function=hf_config.activation_function,
            position_embedding_type=position,
            timm_backbone=getattr(hf_config.backbone_config, "model_type", None) == TIMM_BACKBONE,
        )
        return cls.checked(fields)

    @staticmethod
    def checked(fields: dict[str, Any]) -> dict[str, Any]:
        """``fields``, after the checks of the values the graph's shapes are made of."""
        for name in ("encoder_attention_heads", "decoder_attention_heads"):
            if fields[name] < 1 or fields["d_model"] % fields[name]:
                raise ConfigError(f"d_model {fields['d_model']} does not split into {name}")
        for name in ("num_queries", "num_labels", "encoder_layers", "decoder_layers"):
            if fields[name] < 1:
                raise ConfigError(f"{name} must be positive, not {fields[name]}")
        if fields["backbone"].num_channels != fields["num_channels"]:
            raise ConfigError(
                f"num_channels {fields['num_channels']} differs from the backbone's "
                f"{fields['backbone'].num_channels}"
            )
        return fields


def float_constant(op, value: np.ndarray | float, like):
    """A float32 constant cast to the dtype of ``like``."""
    return op.CastLike(op.Constant(value=ir.tensor(np.asarray(value, np.float32))), like)


def downsample_mask(op, pixel_mask, feature_map):
    """``pixel_mask`` [batch, H, W] at the map's ``[h, w]`` as float (1 real, 0 padding).

    transformers' ``interpolate(mask, size)`` (nearest): source index
    ``floor(i * (H / h))`` in float32, gathered per axis.
    """
    mask = op.Cast(pixel_mask, to=ir.DataType.FLOAT)
    for axis in (1, 2):
        size_in = op.Cast(op.Shape(pixel_mask, start=axis, end=axis + 1), to=ir.DataType.FLOAT)
        size_out = op.Shape(feature_map, start=axis + 1, end=axis + 2)
        step = op.Div(size_in, op.Cast(size_out, to=ir.DataType.FLOAT))
        targets = op.Cast(op.Range(0, op.Squeeze(size_out), 1), to=ir.DataType.FLOAT)
        sources = op.Cast(op.Floor(op.Mul(targets, step)), to=ir.DataType.INT64)
        mask = op.Gather(mask, sources, axis=axis)
    return mask


def frequencies(op, num_features: int, like, temperature: float = SINE_TEMPERATURE):
    """``temperature ** (2 * (i // 2) / num_features)`` for each feature ``i``, in float32."""
    index = np.arange(num_features, dtype=np.float32)
    return float_constant(
        op, np.float32(temperature) ** (2 * np.floor(index / 2) / num_features), like
    )


def sine_cosine(op, angles, num_features: int):
    """The sine of the even features of ``angles [..., num_features]``, the cosine of the odd."""
    even = op.Constant(value=ir.tensor(np.arange(num_features) % 2 == 0))
    return op.Where(even, op.Sin(angles), op.Cos(angles))


def sine_positions(
    op,
    mask,
    num_features: int,
    like,
    temperatures=(SINE_TEMPERATURE, SINE_TEMPERATURE),
    offset: float = 0.0,
):
    """transformers' normalised sine positions of a mask ``[batch, h, w]``: ``[batch, h*w, 2*num_features]``.

    Each axis's running count of real pixels (less ``offset``: Deformable DETR's 0.5 puts
    each pixel at its centre), normalised to ``2 pi`` at its last pixel, divided by the
    :func:`frequencies` of that axis's temperature (``temperatures``: height's, width's);
    even features take its sine, odd its cosine; ``y`` comes first.
    """
    eps = float_constant(op, 1e-6, like)
    scale = float_constant(op, SINE_SCALE, like)
    mask = op.CastLike(mask, like)
    features = []
    for axis, temperature in zip((1, 2), temperatures, strict=True):  # y, then x
        embed = op.CumSum(mask, op.Constant(value_int=axis))
        last = op.Slice(embed, [-1], [2**62], [axis])
        if offset:
            embed = op.Sub(embed, float_constant(op, offset, like))
        embed = op.Mul(op.Div(embed, op.Add(last, eps)), scale)
        dim_t = frequencies(op, num_features, like, temperature)
        angles = op.Div(op.Unsqueeze(embed, [-1]), dim_t)  # [batch, h, w, features]
        features.append(sine_cosine(op, angles, num_features))
    positions = op.Concat(*features, axis=-1)
    return op.Reshape(positions, op.Constant(value_ints=[0, -1, 2 * num_features]))


def sine_of_points(op, points, num_features: int, coordinates: int):
    """transformers' ``encode_sinusoidal_position_embedding`` of ``[batch, queries, coordinates]``
    points ``(x, y[, w, h])`` in [0, 1]: ``[batch, queries, coordinates * num_features]``,
    each coordinate times ``2 pi`` over the :func:`frequencies`, ``y`` before ``x``."""
    dim_t = frequencies(op, num_features, points)
    scale = float_constant(op, SINE_SCALE, points)
    order = [1, 0, *range(2, coordinates)]  # y, x, then the rest
    features = []
    for axis in order:
        coordinate = op.Slice(points, [axis], [axis + 1], [2])  # [batch, queries, 1]
        angles = op.Div(op.Mul(coordinate, scale), dim_t)
        features.append(sine_cosine(op, angles, num_features))
    return op.Concat(*features, axis=-1)


def per_head_concat(op, first, second, num_heads: int):
    """``[batch, seq, heads * d]`` twice -> ``[batch, seq, heads * 2d]``, each head's halves side by side."""
    split = op.Constant(value_ints=[0, 0, num_heads, -1])
    joined = op.Concat(op.Reshape(first, split), op.Reshape(second, split), axis=-1)
    return op.Reshape(joined, op.Constant(value_ints=[0, 0, -1]))


def inverse_sigmoid(op, x, eps: float = 1e-5):
    """transformers' ``inverse_sigmoid``: ``log(x / (1 - x))`` with both clamped at ``eps``."""
    zero, one, low = (float_constant(op, v, x) for v in (0.0, 1.0, eps))
    x = op.Clip(x, zero, one)
    return op.Log(op.Div(op.Max(x, low), op.Max(op.Sub(one, x), low)))


class DetrLearnedPositionEmbedding(nn.Module):
    """Row and column tables (50 each): position ``(y, x)`` is ``[column[x], row[y]]``."""

    def __init__(self, num_features: int) -> None:
        super().__init__()
        self.row_embeddings = Embedding(LEARNED_POSITIONS, num_features)
        self.column_embeddings = Embedding(LEARNED_POSITIONS, num_features)

    def forward(self, op, feature_map):
        height = op.Squeeze(op.Shape(feature_map, start=2, end=3))
        width = op.Squeeze(op.Shape(feature_map, start=3, end=4))
        columns = self.column_embeddings(op, op.Range(0, width, 1))  # [w, f]
        rows = self.row_embeddings(op, op.Range(0, height, 1))  # [h, f]
        grid = op.Concat(op.Shape(rows, start=0, end=1), op.Shape(columns), axis=0)  # [h, w, f]
        columns = op.Expand(op.Unsqueeze(columns, [0]), grid)
        rows = op.Expand(op.Unsqueeze(rows, [1]), grid)
        positions = op.Reshape(
            op.Concat(columns, rows, axis=-1), op.Constant(value_ints=[1, -1, 0])
        )
        batch = op.Shape(feature_map, start=0, end=1)
        return op.Expand(positions, op.Concat(batch, op.Constant(value_ints=[1, 1]), axis=0))


def position_tables(config: DetrConfig) -> DetrLearnedPositionEmbedding | None:
    """The learned row and column tables where ``position_embedding_type`` is learned (sine
    positions are computed from the mask, not stored)."""
    if config.position_embedding_type == "learned":
        return DetrLearnedPositionEmbedding(config.d_model // 2)
    return None


class DetrAttention(nn.Module):
    """Multi-head attention whose queries and keys get their own position embeddings (added
    before the projections), values none."""

    def __init__(self, hidden_size: int, num_heads: int) -> None:
        super().__init__()
        self.k_proj = Linear(hidden_size, hidden_size, bias=True)
        self.v_proj = Linear(hidden_size, hidden_size, bias=True)
        self.q_proj = Linear(hidden_size, hidden_size, bias=True)
        self.out_proj = Linear(hidden_size, hidden_size, bias=True)
        self.num_heads = num_heads
        self.scale = (hidden_size // num_heads) ** -0.5

    def forward(self, op, hidden, keys_values, bias, query_positions=None, key_positions=None):
        queries = hidden if query_positions is None else op.Add(hidden, query_positions)
        keys = keys_values if key_positions is None else op.Add(keys_values, key_positions)
        q, k, v = self.q_proj(op, queries), self.k_proj(op, keys), self.v_proj(op, keys_values)
        heads = self.num_heads
        out = op.Attention(q, k, v, bias, q_num_heads=heads, kv_num_heads=heads, scale=self.scale)
        return self.out_proj(op, out)


class FeedForward(nn.Module):
    """``fc2(act(fc1(x)))`` on the layer itself (the checkpoints' ``layers.N.fc1``), post-normed
    with the residual."""

    def __init__(self, config: DetrConfig, intermediate_size: int) -> None:
        super().__init__()
        self.fc1 = Linear(config.d_model, intermediate_size, bias=True)
        self.fc2 = Linear(intermediate_size, config.d_model, bias=True)
        self.make_activation(config.activation_function)
        self.final_layer_norm = LayerNorm(config.d_model)

    def make_activation(self, name: str) -> None:
        """The activation between ``fc1`` and ``fc2`` (a variant may give it parameters)."""
        self.act = activation(name)

    def feed_forward(self, op, hidden):
        return self.final_layer_norm(op, op.Add(hidden, self.update(op, hidden)))

    def update(self, op, hidden):
        """``fc2(act(fc1(hidden)))``: what the block adds to the residual."""
        return self.fc2(op, self.act(op, self.fc1(op, hidden)))


class DetrEncoderLayer(FeedForward):
    """Self-attention over the pixels (positions on queries and keys), feed-forward; each
    post-normed."""

    def __init__(self, config: DetrConfig) -> None:
        super().__init__(config, config.encoder_ffn_dim)
        self.self_attn = DetrAttention(config.d_model, config.encoder_attention_heads)
        self.self_attn_layer_norm = LayerNorm(config.d_model)

    def forward(self, op, hidden, bias, positions):
        attended = self.self_attn(op, hidden, hidden, bias, positions, positions)
        hidden = self.self_attn_layer_norm(op, op.Add(hidden, attended))
        return self.feed_forward(op, hidden)


class DetrDecoderLayer(FeedForward):
    """Self-attention over the queries, cross-attention to the pixels, feed-forward; each
    post-normed."""

    def __init__(self, config: DetrConfig) -> None:
        super().__init__(config, config.decoder_ffn_dim)
        d = config.d_model
        heads = config.decoder_attention_heads
        self.self_attn = DetrAttention(d, heads)
        self.self_attn_layer_norm = LayerNorm(d)
        self.encoder_attn = DetrAttention(d, heads)
        self.encoder_attn_layer_norm = LayerNorm(d)

    def forward(self, op, hidden, memory, memory_bias, query_positions, memory_positions):
        attended = self.self_attn(op, hidden, hidden, None, query_positions, query_positions)
        hidden = self.self_attn_layer_norm(op, op.Add(hidden, attended))
        attended = self.encoder_attn(
            op, hidden, memory, memory_bias, query_positions, memory_positions
        )
        hidden = self.encoder_attn_layer_norm(op, op.Add(hidden, attended))
        return self.feed_forward(op, hidden)


class DetrEncoder(nn.Module):
    layer_class = DetrEncoderLayer

    def __init__(self, config: DetrConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [self.layer_class(config) for _ in range(config.encoder_layers)]
        )

    def forward(self, op, hidden, bias, positions):
        for layer in self.layers:
            hidden = layer(op, hidden, bias, positions)
        return hidden


class DetrDecoder(nn.Module):
    """The decoder layers over zero-initialised queries, then a final LayerNorm."""

    layer_class = DetrDecoderLayer

    def __init__(self, config: DetrConfig) -> None:
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList(
            [self.make_layer(config, index) for index in range(config.decoder_layers)]
        )
        self.layernorm = LayerNorm(config.d_model)

    def make_layer(self, config: DetrConfig, index: int) -> nn.Module:
        """Decoder layer ``index`` (a variant whose first layer differs overrides this)."""
        return self.layer_class(config)

    def forward(self, op, queries, memory, memory_bias, query_positions, memory_positions):
        hidden = queries
        for layer in self.layers:
            hidden = layer(op, hidden, memory, memory_bias, query_positions, memory_positions)
        return self.layernorm(op, hidden)


class DetrConvEncoder(nn.Module):
    """The backbone under ``model`` (transformers' ``DetrConvEncoder``): its maps."""

    def __init__(self, config: DetrConfig) -> None:
        super().__init__()
        self.model = backbone(config.backbone_type, config.backbone)

    def forward(self, op, pixel_values) -> list:
        return self.model(op, pixel_values)


class DetrConvModel(nn.Module):
    """``backbone.conv_encoder``: the checkpoints' layout (transformers' older ``DetrConvModel``)."""

    def __init__(self, config: DetrConfig) -> None:
        super().__init__()
        self.conv_encoder = DetrConvEncoder(config)

    def forward(self, op, pixel_values) -> list:
        return self.conv_encoder(op, pixel_values)


class DetrModel(nn.Module):
    """Backbone, 1x1 projection, encoder over the last map's pixels, decoder over the queries:
    ``(decoder states [batch, queries, d_model], memory, memory_bias, memory_positions)``."""

    encoder_class = DetrEncoder
    decoder_class = DetrDecoder

    def __init__(self, config: DetrConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.backbone = DetrConvModel(config)
        self.position_embedding = position_tables(config)
        self.query_position_embeddings = Embedding(config.num_queries, d)
        channels = config.backbone.feature_channels()[-1]
        self.input_projection = Conv2d(channels, d, 1)
        self.encoder = self.encoder_class(config)
        self.decoder = self.decoder_class(config)

    def spatial_positions(self, op, feature_map, mask):
        """The positions of the map's pixels ``[batch, h*w, d_model]``."""
        if self.position_embedding is not None:
            return self.position_embedding(op, feature_map)
        return sine_positions(op, mask, self.config.d_model // 2, feature_map)

    def encode(self, op, pixel_values, pixel_mask):
        """``(memory [batch, h*w, d_model], memory mask [batch, h*w], positions)``."""
        feature_map = self.backbone(op, pixel_values)[-1]
        mask = downsample_mask(op, pixel_mask, feature_map)
        projected = self.input_projection(op, feature_map)  # [batch, d, h, w]
        tokens = op.Reshape(
            op.Transpose(projected, perm=[0, 2, 3, 1]),
            op.Constant(value_ints=[0, -1, self.config.d_model]),
        )
        positions = self.spatial_positions(op, feature_map, mask)
        flat_mask = op.Reshape(mask, op.Constant(value_ints=[0, -1]))
        bias = padding_bias(op, flat_mask, pixel_values.dtype)
        memory = self.encoder(op, tokens, bias, positions)
        return memory, flat_mask, positions

    def query_table(self) -> nn.Module:
        """The embedding of the queries (DETR: ``query_position_embeddings``)."""
        return self.query_position_embeddings

    def query_positions(self, op, memory):
        """The learned query embeddings, one copy per image ``[batch, queries, dim]``."""
        batch = op.Shape(memory, start=0, end=1)
        every_query = op.Constant(value_ints=list(range(self.config.num_queries)))
        table = op.Unsqueeze(self.query_table()(op, every_query), [0])
        return op.Expand(table, op.Concat(batch, op.Constant(value_ints=[1, 1]), axis=0))

    def zero_queries(self, op, query_positions):
        """The decoder's first states: zeros shaped as the query embeddings."""
        return op.Mul(query_positions, float_constant(op, 0.0, query_positions))

    def forward(self, op, pixel_values, pixel_mask):
        memory, memory_mask, memory_positions = self.encode(op, pixel_values, pixel_mask)
        query_positions = self.query_positions(op, memory)
        queries = self.zero_queries(op, query_positions)
        memory_bias = padding_bias(op, memory_mask, pixel_values.dtype, queries)
        return self.decoder(op, queries, memory, memory_bias, query_positions, memory_positions)


class DetrMLPPredictionHead(nn.Module):
    """Linear layers with ReLU between them (the box head: ``d_model`` -> 4)."""

    def __init__(self, input_dim: int, hidden_dim: int, output_dim: int, num_layers: int) -> None:
        super().__init__()
        dims = [input_dim] + [hidden_dim] * (num_layers - 1)
        outs = [hidden_dim] * (num_layers - 1) + [output_dim]
        self.layers = nn.ModuleList(
            [Linear(i, o, bias=True) for i, o in zip(dims, outs, strict=True)]
        )

    def forward(self, op, x):
        last = len(self.layers) - 1
        for index, layer in enumerate(self.layers):
            x = layer(op, x)
            x = op.Relu(x) if index < last else x
        return x


class DetrForObjectDetection(DetectionModel):
    """DETR with its heads: ``logits`` over ``num_labels + 1`` classes (the last: no object),
    ``pred_boxes`` the sigmoid of the box head."""

    config_class = DetrConfig
    model_class = DetrModel

    def __init__(self, config: DetrConfig) -> None:
        super().__init__()
        self.config = config
        self.model = self.model_class(config)
        d = config.d_model
        self.class_labels_classifier = Linear(d, self.num_classes(), bias=True)
        self.bbox_predictor = DetrMLPPredictionHead(d, d, 4, 3)

    def num_classes(self) -> int:
        """The class logits per query: the labels and "no object"."""
        return self.config.num_labels + 1

    def output_shapes(self) -> dict[str, list]:
        queries = self.config.num_queries
        return {
            "logits": ["batch", queries, self.num_classes()],
            "pred_boxes": ["batch", queries, 4],
        }

    @property
    def ignored(self) -> tuple[str, ...]:
        """BatchNorm step counters a backbone checkpoint may carry."""
        return (BATCHNORM_COUNTERS,)

    def sanitize(self, weights: dict) -> dict:
        """A timm backbone's tensors under transformers' ResNet names."""
        if not self.config.timm_backbone:
            return weights
        cut = len(BACKBONE_PREFIX)
        return {
            BACKBONE_PREFIX + timm_to_transformers_name(k[cut:])
            if k.startswith(BACKBONE_PREFIX)
            else k: v
            for k, v in weights.items()
        }

    def forward(self, op, pixel_values, pixel_mask):
        return self.predict(op, self.model(op, pixel_values, pixel_mask))

    def predict(self, op, decoded):
        """The heads on the decoder's output (DETR: its states ``[batch, queries, d_model]``)."""
        logits = self.class_labels_classifier(op, decoded)
        boxes = op.Sigmoid(self.bbox_predictor(op, decoded))
        return {"logits": logits, "pred_boxes": boxes}
