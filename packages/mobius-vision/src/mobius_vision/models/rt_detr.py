"""RT-DETR: a ResNet-vd backbone, a hybrid encoder (AIFI + CCFM), top-k query selection and a
decoder of deformable cross-attention that refines its boxes layer by layer.

The graph follows ``RTDetrForObjectDetection`` in eval mode:

1. the backbone's maps (``out_features``, strides 8/16/32), each projected to
   ``encoder_hidden_dim`` (``model.encoder_input_proj.N``: 1x1 conv + BatchNorm);
2. the hybrid encoder: transformer layers over the pixels of the maps ``encode_proj_layers``
   names (AIFI, with 2D sine positions), a top-down FPN and a bottom-up PAN of CSP-RepVGG
   blocks (``model.encoder.*``);
3. each level projected to ``d_model`` (``model.decoder_input_proj.N``) and flattened;
   anchors per pixel (centre, ``0.05 * 2**level`` wide, logit space; pixels near the edge
   invalid) added to the encoder head's boxes; the ``num_queries`` pixels whose best class
   logit is highest are chosen with ``TopK`` (exact ties could order differently from
   ``torch.topk``; on real-valued logits they do not occur);
4. the decoder: self-attention over the queries (positions from their boxes), deformable
   attention to every level around each box, feed-forward; after each layer the box head
   refines the boxes in logit space and the class head scores them. ``logits`` and
   ``pred_boxes`` are the last layer's.

``pixel_mask`` is not read (transformers ignores it too). Module names follow the
checkpoints, so weights map by identity; the denoising embedding (training only) is
ignored. RT-DETR v2 (:mod:`.rt_detr_v2`) and D-FINE (:mod:`.d_fine`) subclass the pieces
they change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear
from mobius.errors import ConfigError
from mobius_vision.models._backbone import backbone
from mobius_vision.models._backbone_config import backbone_config
from mobius_vision.models._conv import (
    BATCHNORM_COUNTERS,
    BatchNorm2d,
    Conv2d,
    Identity,
    Sequential,
    activation,
)
from mobius_vision.models._deformable import (
    MultiscaleDeformableAttention,
    flatten_map,
    map_shape,
)
from mobius_vision.models._detr import DetrAttention, DetrMLPPredictionHead, float_constant
from mobius_vision.tasks.object_detection import DetectionModel

#: transformers' anchor width at the first level (doubling per level), and the margin that
#: marks an anchor invalid.
ANCHOR_GRID_SIZE = 0.05
ANCHOR_EPS = 1e-2
#: ``inverse_sigmoid``'s clamp.
INVERSE_SIGMOID_EPS = 1e-5
#: The value of invalid anchors (``torch.finfo(float32).max``).
FLOAT32_MAX = float(np.finfo(np.float32).max)
#: The RepVGG blocks of each CSP layer.
CSP_BLOCKS = 3


def _ints(hf_config: Any, name: str) -> tuple[int, ...]:
    values = getattr(hf_config, name)
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, int) for v in values):
        raise ConfigError(f"{name} must be a list of integers, not {values!r}")
    return tuple(values)


@dataclass
class RTDetrConfig:
    """RT-DETR's sizes, its backbone's config, and its switches."""

    model_type: str
    backbone_type: str
    backbone: Any
    num_channels: int = 3
    num_labels: int = 80
    num_queries: int = 300
    d_model: int = 256
    encoder_hidden_dim: int = 256
    encoder_in_channels: tuple[int, ...] = (512, 1024, 2048)
    encode_proj_layers: tuple[int, ...] = (2,)
    encoder_layers: int = 1
    encoder_ffn_dim: int = 1024
    encoder_attention_heads: int = 8
    encoder_activation_function: str = "gelu"
    activation_function: str = "silu"
    positional_encoding_temperature: int = 10000
    #: Set: AIFI adds no positions (transformers' eval-time switch).
    eval_size: Any = None
    normalize_before: bool = False
    hidden_expansion: float = 1.0
    decoder_in_channels: tuple[int, ...] = (256, 256, 256)
    num_feature_levels: int = 3
    decoder_layers: int = 6
    decoder_attention_heads: int = 8
    decoder_ffn_dim: int = 1024
    decoder_n_points: int = 4
    decoder_activation_function: str = "relu"
    layer_norm_eps: float = 1e-5
    batch_norm_eps: float = 1e-5
    anchor_image_size: tuple[int, int] | None = None

    @classmethod
    def from_hf(cls, hf_config: Any) -> RTDetrConfig:
        """Normalise a transformers config object."""
        return cls(**cls.hf_fields(hf_config))

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        """The constructor arguments read from ``hf_config``; variants add to this dict."""
        hf_backbone = hf_config.backbone_config
        backbone_type = getattr(hf_backbone, "model_type", None)
        if not isinstance(backbone_type, str):
            raise ConfigError(f"{hf_config.model_type}: backbone_config names no model_type")
        anchor = hf_config.anchor_image_size
        if anchor is not None:
            anchor = tuple(anchor) if isinstance(anchor, (list, tuple)) else (anchor, anchor)
            if len(anchor) != 2 or not all(isinstance(v, int) and v > 0 for v in anchor):
                raise ConfigError(f"anchor_image_size {anchor!r} is not a positive (h, w)")
        backbone = backbone_config(hf_backbone)
        fields = dict(
            model_type=hf_config.model_type,
            backbone_type=backbone_type,
            backbone=backbone,
            num_channels=int(backbone.num_channels),
            num_labels=int(hf_config.num_labels),
            num_queries=int(hf_config.num_queries),
            d_model=int(hf_config.d_model),
            encoder_hidden_dim=int(hf_config.encoder_hidden_dim),
            encoder_in_channels=_ints(hf_config, "encoder_in_channels"),
            encode_proj_layers=_ints(hf_config, "encode_proj_layers"),
            encoder_layers=int(hf_config.encoder_layers),
            encoder_ffn_dim=int(hf_config.encoder_ffn_dim),
            encoder_attention_heads=int(hf_config.encoder_attention_heads),
            encoder_activation_function=hf_config.encoder_activation_function,
            activation_function=hf_config.activation_function,
            positional_encoding_temperature=int(hf_config.positional_encoding_temperature),
            eval_size=hf_config.eval_size,
            normalize_before=bool(hf_config.normalize_before),
            hidden_expansion=float(hf_config.hidden_expansion),
            decoder_in_channels=_ints(hf_config, "decoder_in_channels"),
            num_feature_levels=int(hf_config.num_feature_levels),
            decoder_layers=int(hf_config.decoder_layers),
            decoder_attention_heads=int(hf_config.decoder_attention_heads),
            decoder_ffn_dim=int(hf_config.decoder_ffn_dim),
            decoder_n_points=int(hf_config.decoder_n_points),
            decoder_activation_function=hf_config.decoder_activation_function,
            layer_norm_eps=float(hf_config.layer_norm_eps),
            batch_norm_eps=float(hf_config.batch_norm_eps),
            anchor_image_size=anchor,
        )
        if hf_config.learn_initial_query:
            # transformers' own RTDetrModel fails on it (it tiles the Embedding module), so
            # there is no reference to build it against
            raise ConfigError(f"{hf_config.model_type}: learn_initial_query is not supported")
        cls.check(fields)
        return fields

    @staticmethod
    def check(fields: dict[str, Any]) -> None:
        """Refuse sizes the graph cannot be built from."""
        levels = len(fields["encoder_in_channels"])
        if fields["backbone"].feature_channels() != list(fields["encoder_in_channels"]):
            raise ConfigError(
                f"encoder_in_channels {fields['encoder_in_channels']} differ from the backbone's "
                f"maps {fields['backbone'].feature_channels()}"
            )
        if not all(0 <= index < levels for index in fields["encode_proj_layers"]):
            raise ConfigError(
                f"encode_proj_layers {fields['encode_proj_layers']} outside 0..{levels - 1}"
            )
        if len(fields["decoder_in_channels"]) != levels:
            raise ConfigError("decoder_in_channels must have one entry per encoder level")
        if fields["num_feature_levels"] < levels:
            raise ConfigError(f"num_feature_levels must be at least {levels}")
        for width, heads in (
            ("encoder_hidden_dim", "encoder_attention_heads"),
            ("d_model", "decoder_attention_heads"),
        ):
            if fields[heads] <= 0 or fields[width] % fields[heads]:
                raise ConfigError(f"{width} {fields[width]} is not a multiple of {heads}")


class ConvNormLayer(nn.Module):
    """``conv`` (no bias, ``(k - 1) // 2`` padding unless given), ``norm`` (BatchNorm),
    activation."""

    def __init__(
        self, config, in_ch, out_ch, kernel_size, stride=1, padding=None, act=None, groups=1
    ):
        super().__init__()
        pad = (kernel_size - 1) // 2 if padding is None else padding
        self.conv = Conv2d(in_ch, out_ch, kernel_size, stride, pad, groups=groups, bias=False)
        self.norm = BatchNorm2d(out_ch, config.batch_norm_eps)
        self.act = activation(act)

    def forward(self, op, x):
        return self.act(op, self.norm(op, self.conv(op, x)))


class ConvBatchNorm(Sequential):
    """``Sequential(Conv2d(bias=False), BatchNorm2d)``: the input projections."""

    def __init__(self, in_ch, out_ch, kernel_size=1, stride=1, padding=0, eps=1e-5) -> None:
        super().__init__(
            [
                Conv2d(in_ch, out_ch, kernel_size, stride, padding, bias=False),
                BatchNorm2d(out_ch, eps),
            ]
        )


class RepVggBlock(nn.Module):
    """A 3x3 and a 1x1 conv layer summed, then the activation (``channels`` wide: by default the
    encoder's width times ``hidden_expansion``)."""

    def __init__(self, config: RTDetrConfig, channels: int | None = None) -> None:
        super().__init__()
        hidden = channels or int(config.encoder_hidden_dim * config.hidden_expansion)
        self.conv1 = ConvNormLayer(config, hidden, hidden, 3, 1, padding=1)
        self.conv2 = ConvNormLayer(config, hidden, hidden, 1, 1, padding=0)
        self.act = activation(config.activation_function)

    def forward(self, op, x):
        return self.act(op, op.Add(self.conv1(op, x), self.conv2(op, x)))


class CSPRepLayer(nn.Module):
    """Two 1x1 branches of the concatenated maps, one through RepVGG blocks, summed (then a 1x1
    conv where the expansion changed the width)."""

    def __init__(self, config: RTDetrConfig) -> None:
        super().__init__()
        out = config.encoder_hidden_dim
        hidden = int(out * config.hidden_expansion)
        act = config.activation_function
        self.conv1 = ConvNormLayer(config, 2 * out, hidden, 1, act=act)
        self.conv2 = ConvNormLayer(config, 2 * out, hidden, 1, act=act)
        self.bottlenecks = Sequential([RepVggBlock(config) for _ in range(CSP_BLOCKS)])
        self.conv3 = ConvNormLayer(config, hidden, out, 1, act=act) if hidden != out else Identity()

    def forward(self, op, x):
        branch = self.bottlenecks(op, self.conv1(op, x))
        return self.conv3(op, op.Add(branch, self.conv2(op, x)))


class FeedForwardLayer(nn.Module):
    """A layer's ``fc1``/``fc2`` (on the layer itself, as the checkpoints hold them)."""

    def __init__(self, hidden: int, intermediate: int, act: str) -> None:
        super().__init__()
        self.fc1 = Linear(hidden, intermediate, bias=True)
        self.fc2 = Linear(intermediate, hidden, bias=True)
        self.act = activation(act)

    def feed_forward(self, op, x):
        """``fc2(act(fc1(x)))``."""
        return self.fc2(op, self.act(op, self.fc1(op, x)))


class RTDetrEncoderLayer(FeedForwardLayer):
    """Self-attention then feed-forward, each with its LayerNorm after (or, with
    ``normalize_before``, before) the residual."""

    def __init__(self, config: RTDetrConfig) -> None:
        d = config.encoder_hidden_dim
        super().__init__(d, config.encoder_ffn_dim, config.encoder_activation_function)
        self.normalize_before = config.normalize_before
        self.self_attn = DetrAttention(d, config.encoder_attention_heads)
        self.self_attn_layer_norm = LayerNorm(d, config.layer_norm_eps)
        self.final_layer_norm = LayerNorm(d, config.layer_norm_eps)

    def forward(self, op, hidden, positions):
        pre = self.normalize_before
        attended = self.self_attn_layer_norm(op, hidden) if pre else hidden
        attended = self.self_attn(op, attended, attended, None, positions, positions)
        hidden = op.Add(hidden, attended)
        hidden = self.final_layer_norm(op, hidden) if pre else self.self_attn_layer_norm(op, hidden)
        hidden = op.Add(hidden, self.feed_forward(op, hidden))
        return hidden if pre else self.final_layer_norm(op, hidden)


def sine_positions_2d(op, feature_map, dim: int, temperature: float):
    """transformers' ``build_2d_sinusoidal_position_embedding`` of the map's grid,
    ``[1, h*w, dim]``: ``[sin(y w) | cos(y w) | sin(x w) | cos(x w)]``, row by row."""
    quarter = dim // 4
    omega = 1.0 / temperature ** (np.arange(quarter, dtype=np.float64) / quarter)
    omega = float_constant(op, omega.astype(np.float32), feature_map)
    height, width = map_shape(op, feature_map)
    rows = op.CastLike(op.Range(0, op.Squeeze(height), 1), feature_map)
    columns = op.CastLike(op.Range(0, op.Squeeze(width), 1), feature_map)
    grid = op.Concat(height, width, op.Constant(value_ints=[quarter]), axis=0)
    y = op.Expand(op.Unsqueeze(op.Mul(op.Unsqueeze(rows, [1]), omega), [1]), grid)
    x = op.Expand(op.Unsqueeze(op.Mul(op.Unsqueeze(columns, [1]), omega), [0]), grid)
    positions = op.Concat(op.Sin(y), op.Cos(y), op.Sin(x), op.Cos(x), axis=-1)
    return op.Reshape(positions, op.Constant(value_ints=[1, -1, dim]))


class AIFILayer(nn.Module):
    """Transformer layers over one map's pixels (with sine positions unless ``eval_size``)."""

    def __init__(self, config: RTDetrConfig) -> None:
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList(
            [RTDetrEncoderLayer(config) for _ in range(config.encoder_layers)]
        )

    def forward(self, op, feature_map):
        config = self.config
        hidden = flatten_map(op, feature_map)
        positions = None
        if config.eval_size is None:
            positions = sine_positions_2d(
                op, feature_map, config.encoder_hidden_dim, config.positional_encoding_temperature
            )
        for layer in self.layers:
            hidden = layer(op, hidden, positions)
        back = op.Concat(
            op.Constant(value_ints=[0, config.encoder_hidden_dim]),
            *map_shape(op, feature_map),
            axis=0,
        )
        return op.Reshape(op.Transpose(hidden, perm=[0, 2, 1]), back)


class RTDetrHybridEncoder(nn.Module):
    """AIFI on the chosen levels, a top-down FPN, a bottom-up PAN: one map per level."""

    def __init__(self, config: RTDetrConfig) -> None:
        super().__init__()
        self.config = config
        stages = len(config.encoder_in_channels) - 1
        #: AIFI, one per ``encode_proj_layers`` level (the checkpoints' ``encoder.encoder.N``)
        self.encoder = nn.ModuleList([AIFILayer(config) for _ in config.encode_proj_layers])
        self.lateral_convs = nn.ModuleList([self.lateral_conv(config) for _ in range(stages)])
        self.fpn_blocks = nn.ModuleList([self.fusion_block(config) for _ in range(stages)])
        self.downsample_convs = nn.ModuleList([self.downsample_conv(config) for _ in range(stages)])
        self.pan_blocks = nn.ModuleList([self.fusion_block(config) for _ in range(stages)])

    def lateral_conv(self, config: RTDetrConfig) -> nn.Module:
        """The FPN's 1x1 step before upsampling (RT-DETR: activated)."""
        d = config.encoder_hidden_dim
        return ConvNormLayer(config, d, d, 1, 1, act=config.activation_function)

    def fusion_block(self, config: RTDetrConfig) -> nn.Module:
        """The FPN's and PAN's block over two concatenated maps (RT-DETR: CSP-RepVGG)."""
        return CSPRepLayer(config)

    def downsample_conv(self, config: RTDetrConfig) -> nn.Module:
        """The PAN's stride-2 step (RT-DETR: a 3x3 conv layer)."""
        d = config.encoder_hidden_dim
        return ConvNormLayer(config, d, d, 3, 2, act=config.activation_function)

    def forward(self, op, maps: list) -> list:
        maps = list(maps)
        if self.config.encoder_layers > 0:
            for aifi, level in zip(self.encoder, self.config.encode_proj_layers, strict=True):
                maps[level] = aifi(op, maps[level])
        stages = len(maps) - 1
        fpn = [maps[-1]]
        for index, (lateral, block) in enumerate(
            zip(self.lateral_convs, self.fpn_blocks, strict=True)
        ):
            top = lateral(op, fpn[-1])
            fpn[-1] = top
            upsampled = op.Resize(
                top,
                None,
                op.Constant(value_floats=[1.0, 1.0, 2.0, 2.0]),
                mode="nearest",
                coordinate_transformation_mode="asymmetric",
                nearest_mode="floor",
            )
            fpn.append(block(op, op.Concat(upsampled, maps[stages - index - 1], axis=1)))
        fpn.reverse()
        pan = [fpn[0]]
        for index, (down, block) in enumerate(
            zip(self.downsample_convs, self.pan_blocks, strict=True)
        ):
            pan.append(block(op, op.Concat(down(op, pan[-1]), fpn[index + 1], axis=1)))
        return pan


def inverse_sigmoid(op, x):
    """transformers' ``inverse_sigmoid``: ``log(x / (1 - x))`` with both clamped to 1e-5."""
    zero, one = float_constant(op, 0.0, x), float_constant(op, 1.0, x)
    eps = float_constant(op, INVERSE_SIGMOID_EPS, x)
    x = op.Clip(x, zero, one)
    return op.Log(op.Div(op.Max(x, eps), op.Max(op.Sub(one, x), eps)))


def level_anchors(op, level_shapes, like):
    """``(anchors [1, pixels, 4] in logit space, valid [1, pixels, 1] float)``: per pixel of
    each level its centre and a ``0.05 * 2**level`` box; a box not inside ``(0.01, 0.99)``
    is invalid (its anchor ``float32`` max)."""
    anchors = []
    for level, (height, width) in enumerate(level_shapes):
        h, w = op.CastLike(height, like), op.CastLike(width, like)
        half = float_constant(op, 0.5, like)
        rows = op.Div(op.Add(op.CastLike(op.Range(0, op.Squeeze(height), 1), like), half), h)
        columns = op.Div(op.Add(op.CastLike(op.Range(0, op.Squeeze(width), 1), like), half), w)
        grid = op.Concat(height, width, op.Constant(value_ints=[1]), axis=0)
        x = op.Expand(op.Unsqueeze(columns, [0, 2]), grid)
        y = op.Expand(op.Unsqueeze(rows, [1, 2]), grid)
        size = op.Expand(float_constant(op, ANCHOR_GRID_SIZE * 2.0**level, like), grid)
        box = op.Concat(x, y, size, size, axis=-1)
        anchors.append(op.Reshape(box, op.Constant(value_ints=[1, -1, 4])))
    anchors = op.Concat(*anchors, axis=1)
    low, high = float_constant(op, ANCHOR_EPS, like), float_constant(op, 1 - ANCHOR_EPS, like)
    inside = op.And(op.Greater(anchors, low), op.Less(anchors, high))
    valid = op.Cast(
        op.ReduceMin(
            op.Cast(inside, to=ir.DataType.INT64), op.Constant(value_ints=[-1]), keepdims=1
        ),
        to=ir.DataType.BOOL,
    )
    logits = op.Log(op.Div(anchors, op.Sub(float_constant(op, 1.0, like), anchors)))
    logits = op.Where(valid, logits, float_constant(op, FLOAT32_MAX, like))
    return logits, op.CastLike(valid, like)


def gather_queries(op, values, indices):
    """``values [batch, pixels, c]`` at ``indices [batch, queries]``: ``[batch, queries, c]``."""
    expanded = op.Expand(
        op.Unsqueeze(indices, [-1]), op.Concat(op.Shape(indices), op.Shape(values, start=2), axis=0)
    )
    return op.GatherElements(values, expanded, axis=1)


class RTDetrDecoderLayer(FeedForwardLayer):
    """Self-attention over the queries, deformable attention around their boxes,
    feed-forward; each post-normed."""

    def __init__(self, config: RTDetrConfig) -> None:
        d = config.d_model
        super().__init__(d, config.decoder_ffn_dim, config.decoder_activation_function)
        eps = config.layer_norm_eps
        self.self_attn = DetrAttention(d, config.decoder_attention_heads)
        self.self_attn_layer_norm = LayerNorm(d, eps)
        self.encoder_attn = self.cross_attention(config)
        self.encoder_attn_layer_norm = LayerNorm(d, eps)
        self.final_layer_norm = LayerNorm(d, eps)

    def cross_attention(self, config: RTDetrConfig) -> nn.Module:
        """The deformable attention to the levels (v2 samples differently)."""
        return MultiscaleDeformableAttention(
            config.d_model,
            config.decoder_attention_heads,
            config.num_feature_levels,
            config.decoder_n_points,
            box_references=True,
        )

    def forward(self, op, hidden, positions, memory, boxes, level_shapes):
        attended = self.self_attn(op, hidden, hidden, None, positions, positions)
        hidden = self.self_attn_layer_norm(op, op.Add(hidden, attended))
        references = op.Unsqueeze(boxes, [2])  # one box for every level
        attended = self.encoder_attn(op, hidden, memory, references, level_shapes, None, positions)
        hidden = self.encoder_attn_layer_norm(op, op.Add(hidden, attended))
        return self.final_layer_norm(op, op.Add(hidden, self.feed_forward(op, hidden)))


class RTDetrDecoder(nn.Module):
    """The layers, each followed by its box head (refining the boxes in logit space); returns
    the last layer's class head's ``logits`` and its ``boxes``."""

    layer_class = RTDetrDecoderLayer

    def __init__(self, config: RTDetrConfig) -> None:
        super().__init__()
        d = config.d_model
        self.layers = nn.ModuleList(
            [self.layer_class(config) for _ in range(config.decoder_layers)]
        )
        self.query_pos_head = DetrMLPPredictionHead(4, 2 * d, d, 2)
        self.class_embed = nn.ModuleList(
            [Linear(d, config.num_labels, bias=True) for _ in range(config.decoder_layers)]
        )
        self.bbox_embed = nn.ModuleList(
            [DetrMLPPredictionHead(d, d, 4, 3) for _ in range(config.decoder_layers)]
        )

    def forward(self, op, queries, memory, boxes_logits, level_shapes):
        hidden, boxes = queries, op.Sigmoid(boxes_logits)
        for layer, box_head in zip(self.layers, self.bbox_embed, strict=True):
            positions = self.query_pos_head(op, boxes)
            hidden = layer(op, hidden, positions, memory, boxes, level_shapes)
            boxes = op.Sigmoid(op.Add(box_head(op, hidden), inverse_sigmoid(op, boxes)))
        return self.class_embed[-1](op, hidden), boxes


class RTDetrConvEncoder(nn.Module):
    """``backbone.model``: the registered backbone's maps."""

    def __init__(self, config: RTDetrConfig) -> None:
        super().__init__()
        self.model = backbone(config.backbone_type, config.backbone)

    def forward(self, op, pixel_values) -> list:
        return self.model(op, pixel_values)


class RTDetrModel(nn.Module):
    """Backbone, hybrid encoder, query selection, decoder: ``(logits, boxes)``."""

    encoder_class = RTDetrHybridEncoder
    decoder_class = RTDetrDecoder

    def __init__(self, config: RTDetrConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.backbone = RTDetrConvEncoder(config)
        self.encoder_input_proj = nn.ModuleList(
            [ConvBatchNorm(c, config.encoder_hidden_dim) for c in config.encoder_in_channels]
        )
        self.encoder = self.encoder_class(config)
        self.enc_output = Sequential([Linear(d, d, bias=True), LayerNorm(d, config.layer_norm_eps)])
        self.enc_score_head = Linear(d, config.num_labels, bias=True)
        self.enc_bbox_head = DetrMLPPredictionHead(d, d, 4, 3)
        self.decoder_input_proj = nn.ModuleList(self.decoder_projections(config))
        self.decoder = self.decoder_class(config)

    def decoder_projections(self, config: RTDetrConfig) -> list:
        """Each level's projection to ``d_model`` (1x1 conv + BatchNorm), then the extra
        levels' 3x3 stride-2 ones."""
        d, eps = config.d_model, config.batch_norm_eps
        projections = [ConvBatchNorm(c, d, eps=eps) for c in config.decoder_in_channels]
        in_ch = config.decoder_in_channels[-1]
        for _ in range(config.num_feature_levels - len(projections)):
            projections.append(ConvBatchNorm(in_ch, d, 3, 2, 1, eps=eps))
            in_ch = d
        return projections

    def levels(self, op, pixel_values) -> list:
        """The decoder's levels ``[batch, d_model, h, w]``."""
        maps = self.backbone(op, pixel_values)
        maps = [proj(op, m) for proj, m in zip(self.encoder_input_proj, maps, strict=True)]
        encoded = self.encoder(op, maps)
        projections = list(self.decoder_input_proj)
        levels = [proj(op, m) for proj, m in zip(projections, encoded)]  # noqa: B905 (extra levels)
        # transformers feeds every extra level the last encoder map (not the previous level)
        levels += [proj(op, encoded[-1]) for proj in projections[len(encoded) :]]
        return levels

    def forward(self, op, pixel_values):
        levels = self.levels(op, pixel_values)
        level_shapes = [map_shape(op, level) for level in levels]
        memory = op.Concat(*(flatten_map(op, level) for level in levels), axis=1)
        anchors, valid = level_anchors(op, level_shapes, memory)
        selected = self.enc_output(op, op.Mul(valid, memory))
        scores = self.enc_score_head(op, selected)
        boxes = op.Add(self.enc_bbox_head(op, selected), anchors)
        best = op.ReduceMax(scores, op.Constant(value_ints=[-1]), keepdims=0)
        count = op.Constant(value_ints=[self.config.num_queries])
        _, chosen = op.TopK(best, count, axis=1, largest=1, sorted=1, _outputs=2)
        boxes = gather_queries(op, boxes, chosen)
        queries = gather_queries(op, selected, chosen)  # the chosen pixels' encoder states
        return self.decoder(op, queries, memory, boxes, level_shapes)


class RTDetrForObjectDetection(DetectionModel):
    """RT-DETR with its heads: ``logits`` over ``num_labels`` classes (scored with a sigmoid),
    ``pred_boxes`` normalised ``(cx, cy, w, h)``."""

    config_class = RTDetrConfig
    model_class = RTDetrModel
    takes_pixel_mask = False

    def __init__(self, config: RTDetrConfig) -> None:
        super().__init__()
        self.config = config
        self.model = self.model_class(config)

    def image_dims(self) -> list:
        """The anchor image's size where the config fixes it, else any size."""
        if self.config.anchor_image_size is not None:
            return list(self.config.anchor_image_size)
        return ["height", "width"]

    def output_shapes(self) -> dict[str, list]:
        queries = self.config.num_queries
        return {
            "logits": ["batch", queries, self.config.num_labels],
            "pred_boxes": ["batch", queries, 4],
        }

    @property
    def ignored(self) -> tuple[str, ...]:
        """BatchNorm counters, the denoising embedding (training only) and the class heads of
        the layers before the last (their scores feed the training loss only)."""
        earlier_heads = tuple(
            f"model.decoder.class_embed.{index}.*"
            for index in range(self.config.decoder_layers - 1)
        )
        return (BATCHNORM_COUNTERS, "model.denoising_class_embed.*", *earlier_heads)

    def forward(self, op, pixel_values):
        logits, boxes = self.model(op, pixel_values)
        return {"logits": logits, "pred_boxes": boxes}


MODEL_TYPES = {"rt_detr": RTDetrForObjectDetection}
