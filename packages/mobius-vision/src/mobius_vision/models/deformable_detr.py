"""Deformable DETR: a backbone's maps at several scales, an encoder and a decoder of
multi-scale deformable attention (:mod:`._deformable`), sigmoid class logits.

The graph follows ``DeformableDetrForObjectDetection`` in eval mode; its config picks the
variant:

1. the backbone's maps (``out_features``), each projected to ``d_model`` (1x1 conv +
   GroupNorm(32), ``model.input_proj.N``); up to ``num_feature_levels`` more levels by
   3x3 stride-2 convs, the first on the last backbone map, the next on the level before.
   One level (single-scale) needs one backbone map;
2. per level: ``pixel_mask`` at the level's size (nearest), the sine positions of its real
   pixels (each counted from its centre) or the learned tables, plus ``level_embed``, and
   the valid ratios (the share of real rows and columns);
3. the encoder: deformable self-attention over every level's pixels (padding reads zero),
   each pixel's reference its centre scaled by the valid ratios;
4. the queries: with ``two_stage`` each pixel is a proposal (a box around it,
   ``0.05 * 2**level`` wide; padding and boxes near the edge invalid), scored by the last
   class head (class 0) and moved by the last box head; the ``two_stage_num_proposals``
   best (``TopK``) give the references, and their boxes' sine embedding the query
   positions and contents (``pos_trans``). Otherwise ``query_position_embeddings`` holds
   each query's position and content, and ``reference_points`` maps the position to a point;
5. the decoder: self-attention over the queries, deformable attention around each
   reference, feed-forward; with ``with_box_refine`` each layer's box head moves the
   references (points become boxes) for the next layer.

``logits`` and ``pred_boxes`` are the last layer's heads on its output, the boxes moved
from that layer's references. transformers ties the heads (every layer's to layer 0's, or
to the decoder's with ``with_box_refine`` / ``two_stage``) and reads a tied copy that the
checkpoint holds instead: :meth:`DeformableDetrForObjectDetection.sanitize` does the same.
Backbone names and timm's ResNet follow DETR (:mod:`._detr`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, GroupNorm, LayerNorm, Linear, module_scope
from mobius.errors import ConfigError
from mobius_vision.models._conv import Conv2d, Sequential
from mobius_vision.models._deformable import MultiscaleDeformableAttention, flatten_map, map_shape
from mobius_vision.models._detr import (
    SINE_SCALE,
    DetrAttention,
    DetrConfig,
    DetrConvModel,
    DetrForObjectDetection,
    DetrMLPPredictionHead,
    FeedForward,
    downsample_mask,
    float_constant,
    frequencies,
    inverse_sigmoid,
    position_tables,
    sine_cosine,
    sine_positions,
)
from mobius_vision.models.rt_detr import gather_queries

#: transformers' GroupNorm groups of the input projections.
PROJECTION_GROUPS = 32
#: The sine positions count each pixel from its centre.
PIXEL_CENTRE = 0.5
#: A proposal's width and height at the first level (doubling per level), and the margin
#: that marks a proposal invalid.
PROPOSAL_SIZE = 0.05
PROPOSAL_EPS = 1e-2


@dataclass
class DeformableDetrConfig(DetrConfig):
    """DETR's sizes, and the levels, sampled points and switches of the variants."""

    num_feature_levels: int = 4
    encoder_n_points: int = 4
    decoder_n_points: int = 4
    two_stage: bool = False
    two_stage_num_proposals: int = 300
    with_box_refine: bool = False

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        for name in ("num_feature_levels", "encoder_n_points", "decoder_n_points"):
            fields[name] = int(getattr(hf_config, name))
        fields["two_stage_num_proposals"] = int(hf_config.two_stage_num_proposals)
        for name in ("two_stage", "with_box_refine"):
            value = getattr(hf_config, name)
            if not isinstance(value, bool):
                raise ConfigError(f"deformable_detr: {name} must be true or false, not {value!r}")
            fields[name] = value
        return cls.checked_levels(fields)

    @staticmethod
    def checked_levels(fields: dict[str, Any]) -> dict[str, Any]:
        """``fields``, after the checks of the levels, points and query counts."""
        levels = fields["num_feature_levels"]
        maps = len(fields["backbone"].feature_channels())
        if levels < 1 or maps > levels or (levels == 1 and maps != 1):
            raise ConfigError(
                f"deformable_detr: the backbone returns {maps} maps for num_feature_levels "
                f"{levels} (it needs 1 map for 1 level, at most one per level otherwise)"
            )
        for name in ("encoder_n_points", "decoder_n_points", "two_stage_num_proposals"):
            if fields[name] < 1:
                raise ConfigError(f"deformable_detr: {name} must be positive, not {fields[name]}")
        if fields["d_model"] % PROJECTION_GROUPS:
            raise ConfigError(
                f"deformable_detr: d_model {fields['d_model']} does not split into "
                f"{PROJECTION_GROUPS} GroupNorm groups"
            )
        if fields["two_stage"] and not fields["with_box_refine"]:
            raise ConfigError("deformable_detr: two_stage needs with_box_refine")
        return fields

    @property
    def queries(self) -> int:
        """The decoder's queries: the proposals kept with ``two_stage``, else ``num_queries``."""
        return self.two_stage_num_proposals if self.two_stage else self.num_queries

    @property
    def heads(self) -> int:
        """How many class and box heads there are: one per decoder layer, and the proposals'."""
        return self.decoder_layers + int(self.two_stage)


def refine(op, box_head, hidden, references, coordinates: int):
    """``sigmoid(box_head(hidden) + inverse_sigmoid(references))``: boxes ``[batch, queries, 4]``
    moved from the references (points ``coordinates == 2`` move only their centre)."""
    delta = box_head(op, hidden)
    shift = inverse_sigmoid(op, references)
    if coordinates == 2:
        centre = op.Add(op.Slice(delta, [0], [2], [-1]), shift)
        return op.Sigmoid(op.Concat(centre, op.Slice(delta, [2], [4], [-1]), axis=-1))
    return op.Sigmoid(op.Add(delta, shift))


def real_size(op, mask):
    """``[batch, 1, 2]``: the real columns and rows ``(w, h)`` of a float mask ``[batch, h, w]``
    (its first row counts the columns, its first column the rows)."""
    first_row = op.Squeeze(op.Slice(mask, [0], [1], [1]), [1])  # [batch, w]
    first_column = op.Squeeze(op.Slice(mask, [0], [1], [2]), [2])  # [batch, h]
    axis = op.Constant(value_ints=[1])
    counts = [op.ReduceSum(line, axis, keepdims=1) for line in (first_row, first_column)]
    return op.Unsqueeze(op.Concat(*counts, axis=-1), [1])


def map_size(op, height, width):
    """``(w, h)`` of a level as float32 ``[2]``."""
    return op.Cast(op.Concat(width, height, axis=0), to=ir.DataType.FLOAT)


def valid_ratio(op, mask):
    """``[batch, 1, 2]``: the share of real columns and rows ``(w, h)`` of a float mask
    ``[batch, h, w]`` (transformers' ``get_valid_ratio``)."""
    height, width = op.Shape(mask, start=1, end=2), op.Shape(mask, start=2, end=3)
    return op.Div(real_size(op, mask), map_size(op, height, width))


def pixel_centres(op, height, width):
    """``[h*w, 2]``: ``(x, y)`` of each pixel's centre, row by row, in float32 (ONNX Runtime
    has no float16 Range)."""
    axes = []
    for size in (height, width):
        size = op.Squeeze(op.Cast(size, to=ir.DataType.FLOAT), [0])
        axes.append(op.Range(op.Constant(value_float=0.5), size, op.Constant(value_float=1.0)))
    ys, xs = axes
    grid = op.Concat(op.Shape(ys), op.Shape(xs), axis=0)
    flat = op.Constant(value_ints=[-1])
    xs = op.Reshape(op.Expand(op.Unsqueeze(xs, [0]), grid), flat)
    ys = op.Reshape(op.Expand(op.Unsqueeze(ys, [1]), grid), flat)
    return op.Concat(op.Unsqueeze(xs, [1]), op.Unsqueeze(ys, [1]), axis=1)


def encoder_references(op, level_shapes, ratios, like):
    """``[batch, sequence, levels, 2]``: each pixel's centre over its level's real size,
    times every level's valid ratios (transformers' ``get_reference_points``)."""
    points = []
    for level, (height, width) in enumerate(level_shapes):
        ratio = op.Gather(ratios, op.Constant(value_int=level), axis=1)  # [batch, 2]
        real = op.Unsqueeze(op.Mul(ratio, map_size(op, height, width)), [1])  # [batch, 1, 2]
        points.append(op.Div(pixel_centres(op, height, width), real))
    points = op.Concat(*points, axis=1)  # [batch, sequence, 2]
    return op.CastLike(op.Mul(op.Unsqueeze(points, [2]), op.Unsqueeze(ratios, [1])), like)


def proposals(op, level_shapes, real_pixels, like):
    """``(proposals [batch, sequence, 4] in logit space, usable [batch, sequence, 1])``: a box
    around each pixel (centre over the level's real size, ``0.05 * 2**level`` wide), ``inf``
    where it is padding or not inside ``(0.01, 0.99)`` (transformers'
    ``gen_encoder_output_proposals``). ``real_pixels`` is the float mask ``[batch, sequence]``
    (1 real, 0 padding)."""
    boxes, start = [], op.Constant(value_ints=[0])
    for level, (height, width) in enumerate(level_shapes):
        end = op.Add(start, op.Mul(height, width))
        mask = op.Slice(real_pixels, start, end, [1])
        mask = op.Reshape(mask, op.Concat(op.Constant(value_ints=[0]), height, width, axis=0))
        centres = op.Div(pixel_centres(op, height, width), real_size(op, mask))
        size = float_constant(op, PROPOSAL_SIZE * 2.0**level, centres)
        boxes.append(op.Concat(centres, op.Expand(size, op.Shape(centres)), axis=-1))
        start = end
    boxes = op.Concat(*boxes, axis=1)  # [batch, sequence, 4] float32
    low, high = float_constant(op, PROPOSAL_EPS, boxes), float_constant(op, 1 - PROPOSAL_EPS, boxes)
    inside = op.Cast(op.And(op.Greater(boxes, low), op.Less(boxes, high)), to=ir.DataType.INT64)
    inside = op.ReduceMin(inside, op.Constant(value_ints=[-1]), keepdims=1)
    real = op.Cast(op.Unsqueeze(real_pixels, [-1]), to=ir.DataType.INT64)
    usable = op.Cast(op.Mul(inside, real), to=ir.DataType.BOOL)
    logits = op.Log(op.Div(boxes, op.Sub(float_constant(op, 1.0, boxes), boxes)))
    logits = op.Where(usable, logits, float_constant(op, np.inf, boxes))
    return op.CastLike(logits, like), usable


def box_sine_embedding(op, boxes_logits, d_model: int):
    """transformers' ``get_proposal_pos_embed``: each coordinate of the sigmoid boxes
    ``(cx, cy, w, h)`` times ``2 pi`` over the frequencies of ``d_model // 2`` features, even
    features' sine and odd ones' cosine: ``[batch, queries, 2 * d_model]``."""
    features = d_model // 2
    scaled = op.Mul(op.Sigmoid(boxes_logits), float_constant(op, SINE_SCALE, boxes_logits))
    angles = op.Div(op.Unsqueeze(scaled, [-1]), frequencies(op, features, boxes_logits))
    return op.Reshape(sine_cosine(op, angles, features), op.Constant(value_ints=[0, 0, -1]))


def level_projections(config: DeformableDetrConfig) -> list:
    """``model.input_proj``: each backbone map's 1x1 projection, then the extra levels' 3x3
    stride-2 ones, each followed by GroupNorm(32)."""
    d = config.d_model
    channels = config.backbone.feature_channels()
    projections = [Sequential([Conv2d(c, d, 1), GroupNorm(PROJECTION_GROUPS, d)]) for c in channels]
    in_ch = channels[-1]
    for _ in range(config.num_feature_levels - len(channels)):
        projections.append(Sequential([Conv2d(in_ch, d, 3, 2, 1), GroupNorm(PROJECTION_GROUPS, d)]))
        in_ch = d
    return projections


class DeformableDetrEncoderLayer(FeedForward):
    """Deformable self-attention over every level's pixels (positions on the queries), then
    the feed-forward; each post-normed."""

    def __init__(self, config: DeformableDetrConfig) -> None:
        super().__init__(config, config.encoder_ffn_dim)
        self.self_attn = MultiscaleDeformableAttention(
            config.d_model,
            config.encoder_attention_heads,
            config.num_feature_levels,
            config.encoder_n_points,
        )
        self.self_attn_layer_norm = LayerNorm(config.d_model)

    def forward(self, op, hidden, mask, positions, references, level_shapes):
        attended = self.self_attn(op, hidden, hidden, references, level_shapes, mask, positions)
        hidden = self.self_attn_layer_norm(op, op.Add(hidden, attended))
        return self.feed_forward(op, hidden)


class DeformableDetrEncoder(nn.Module):
    def __init__(self, config: DeformableDetrConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [DeformableDetrEncoderLayer(config) for _ in range(config.encoder_layers)]
        )

    def forward(self, op, hidden, mask, positions, references, level_shapes):
        for layer in self.layers:
            hidden = layer(op, hidden, mask, positions, references, level_shapes)
        return hidden


class DeformableDetrDecoderLayer(FeedForward):
    """Self-attention over the queries, deformable attention around their references (points,
    or boxes with ``box_references``), feed-forward; each post-normed."""

    def __init__(self, config: DeformableDetrConfig, box_references: bool) -> None:
        super().__init__(config, config.decoder_ffn_dim)
        d, heads = config.d_model, config.decoder_attention_heads
        self.self_attn = DetrAttention(d, heads)
        self.self_attn_layer_norm = LayerNorm(d)
        self.encoder_attn = MultiscaleDeformableAttention(
            d, heads, config.num_feature_levels, config.decoder_n_points, box_references
        )
        self.encoder_attn_layer_norm = LayerNorm(d)

    def forward(self, op, hidden, positions, memory, memory_mask, references, level_shapes):
        attended = self.self_attn(op, hidden, hidden, None, positions, positions)
        hidden = self.self_attn_layer_norm(op, op.Add(hidden, attended))
        attended = self.encoder_attn(
            op, hidden, memory, references, level_shapes, memory_mask, positions
        )
        hidden = self.encoder_attn_layer_norm(op, op.Add(hidden, attended))
        return self.feed_forward(op, hidden)


class DeformableDetrDecoder(nn.Module):
    """The layers; with ``with_box_refine`` each one's box head (``bbox_embed``) moves the
    references for the next; with ``two_stage`` the proposals' heads sit here too."""

    def __init__(self, config: DeformableDetrConfig) -> None:
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList(
            [
                DeformableDetrDecoderLayer(config, self.coordinates(index) == 4)
                for index in range(config.decoder_layers)
            ]
        )
        d = config.d_model
        if config.with_box_refine:
            self.bbox_embed = nn.ModuleList(
                [DetrMLPPredictionHead(d, d, 4, 3) for _ in range(config.heads)]
            )
        if config.two_stage:
            self.class_embed = nn.ModuleList(
                [Linear(d, config.num_labels, bias=True) for _ in range(config.heads)]
            )

    def coordinates(self, index: int) -> int:
        """Whether layer ``index``'s references are points (2) or boxes (4): proposals are
        boxes, learned references points until a box head has moved them."""
        config = self.config
        return 4 if config.two_stage or (config.with_box_refine and index > 0) else 2

    def forward(self, op, hidden, positions, memory, memory_mask, references, ratios, level_shapes):
        """``(last layer's states, its references before the valid ratios)``."""
        last = len(self.layers) - 1
        for index, layer in enumerate(self.layers):
            coordinates = self.coordinates(index)
            per_level = ratios if coordinates == 2 else op.Concat(ratios, ratios, axis=-1)
            scaled = op.Mul(op.Unsqueeze(references, [2]), op.Unsqueeze(per_level, [1]))
            hidden = layer(op, hidden, positions, memory, memory_mask, scaled, level_shapes)
            if self.config.with_box_refine and index < last:  # the last move is the head's
                references = refine(op, self.bbox_embed[index], hidden, references, coordinates)
        return hidden, references


class DeformableDetrModel(nn.Module):
    """Backbone, per-level projections, encoder, queries, decoder: ``(the last layer's states,
    its references, their coordinates)``."""

    def __init__(self, config: DeformableDetrConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.backbone = DetrConvModel(config)
        self.position_embedding = position_tables(config)
        self.input_proj = nn.ModuleList(level_projections(config))
        if not config.two_stage:
            self.query_position_embeddings = Embedding(config.num_queries, 2 * d)
            self.reference_points = Linear(d, 2, bias=True)
        self.encoder = DeformableDetrEncoder(config)
        self.decoder = DeformableDetrDecoder(config)
        self.level_embed = nn.Parameter([config.num_feature_levels, d])
        if config.two_stage:
            self.enc_output = Linear(d, d, bias=True)
            self.enc_output_norm = LayerNorm(d)
            self.pos_trans = Linear(2 * d, 2 * d, bias=True)
            self.pos_trans_norm = LayerNorm(2 * d)

    def levels(self, op, pixel_values) -> list:
        """The levels ``[batch, d_model, h, w]``: the backbone's maps projected, then the extra
        ones (the first from the last backbone map, each next from the level before)."""
        maps = self.backbone(op, pixel_values)
        levels = [proj(op, m) for proj, m in zip(self.input_proj, maps)]  # noqa: B905 (extras)
        for index, proj in enumerate(list(self.input_proj)[len(maps) :]):
            levels.append(proj(op, maps[-1] if index == 0 else levels[-1]))
        return levels

    def positions(self, op, level, mask, index: int):
        """A level's pixel positions plus its ``level_embed`` row: ``[batch, h*w, d_model]``."""
        d = self.config.d_model
        if self.position_embedding is not None:
            positions = self.position_embedding(op, level)
        else:
            positions = sine_positions(op, mask, d // 2, level, offset=PIXEL_CENTRE)
        return op.Add(positions, op.Gather(self.level_embed, op.Constant(value_int=index), axis=0))

    def learned_queries(self, op, memory):
        """``(positions, contents [batch, queries, d_model], reference points [batch, queries, 2])``
        from ``query_position_embeddings`` (the first half positions, the second contents)."""
        d = self.config.d_model
        every_query = op.Constant(value_ints=list(range(self.config.num_queries)))
        table = op.Unsqueeze(self.query_position_embeddings(op, every_query), [0])
        batch = op.Shape(memory, start=0, end=1)
        table = op.Expand(table, op.Concat(batch, op.Constant(value_ints=[1, 1]), axis=0))
        halves = op.Constant(value_ints=[d, d])
        positions, contents = op.Split(table, halves, axis=-1, _outputs=2)
        return positions, contents, op.Sigmoid(self.reference_points(op, positions))

    def proposed_queries(self, op, memory, memory_mask, level_shapes):
        """``(positions, contents, reference boxes [batch, queries, 4])`` of the pixels whose
        proposals score best (class 0 of the proposals' head)."""
        d = self.config.d_model
        boxes, usable = proposals(op, level_shapes, memory_mask, memory)
        kept = op.Mul(memory, op.CastLike(usable, memory))  # padding and invalid pixels read zero
        states = self.enc_output_norm(op, self.enc_output(op, kept))
        proposal_heads = self.config.heads - 1  # the heads after the decoder layers'
        with module_scope(op, self.decoder):  # the heads keep the decoder's checkpoint names
            scores = self.decoder.class_embed[proposal_heads](op, states)
            boxes = op.Add(self.decoder.bbox_embed[proposal_heads](op, states), boxes)
        first_class = op.Squeeze(op.Slice(scores, [0], [1], [-1]), [-1])
        count = op.Constant(value_ints=[self.config.two_stage_num_proposals])
        _, chosen = op.TopK(first_class, count, axis=1, largest=1, sorted=1, _outputs=2)
        chosen_boxes = gather_queries(op, boxes, chosen)
        embedded = self.pos_trans_norm(
            op, self.pos_trans(op, box_sine_embedding(op, chosen_boxes, d))
        )
        halves = op.Constant(value_ints=[d, d])
        positions, contents = op.Split(embedded, halves, axis=-1, _outputs=2)
        return positions, contents, op.Sigmoid(chosen_boxes)

    def forward(self, op, pixel_values, pixel_mask):
        levels = self.levels(op, pixel_values)
        level_shapes = [map_shape(op, level) for level in levels]
        masks = [downsample_mask(op, pixel_mask, level) for level in levels]  # float32
        ratios = op.Concat(*(valid_ratio(op, mask) for mask in masks), axis=1)  # [b, levels, 2]
        tokens = op.Concat(*(flatten_map(op, level) for level in levels), axis=1)
        flat = op.Constant(value_ints=[0, -1])
        memory_mask = op.Concat(*(op.Reshape(mask, flat) for mask in masks), axis=1)
        positions = op.Concat(
            *(
                self.positions(op, level, mask, index)
                for index, (level, mask) in enumerate(zip(levels, masks, strict=True))
            ),
            axis=1,
        )
        references = encoder_references(op, level_shapes, ratios, tokens)
        memory = self.encoder(op, tokens, memory_mask, positions, references, level_shapes)
        if self.config.two_stage:
            queries = self.proposed_queries(op, memory, memory_mask, level_shapes)
        else:
            queries = self.learned_queries(op, memory)
        query_positions, contents, references = queries
        ratios = op.CastLike(ratios, memory)
        hidden, references = self.decoder(
            op, contents, query_positions, memory, memory_mask, references, ratios, level_shapes
        )
        return hidden, references, self.decoder.coordinates(self.config.decoder_layers - 1)


class DeformableDetrForObjectDetection(DetrForObjectDetection):
    """Deformable DETR with its heads (``class_embed.N``, ``bbox_embed.N``): ``logits`` over
    ``num_labels`` classes (scored with a sigmoid), ``pred_boxes`` moved from the last
    layer's references."""

    config_class = DeformableDetrConfig
    model_class = DeformableDetrModel

    def __init__(self, config: DeformableDetrConfig) -> None:
        super().__init__(config)
        self.class_labels_classifier = None
        self.bbox_predictor = None
        d = config.d_model
        self.class_embed = nn.ModuleList(
            [Linear(d, config.num_labels, bias=True) for _ in range(config.heads)]
        )
        self.bbox_embed = nn.ModuleList(
            [DetrMLPPredictionHead(d, d, 4, 3) for _ in range(config.heads)]
        )

    def num_classes(self) -> int:
        return self.config.num_labels

    def output_shapes(self) -> dict[str, list]:
        queries = self.config.queries
        return {
            "logits": ["batch", queries, self.config.num_labels],
            "pred_boxes": ["batch", queries, 4],
        }

    @property
    def ignored(self) -> tuple[str, ...]:
        """The heads only the training loss reads (the other layers', the decoder's copies)."""
        heads = ("class_embed.*", "bbox_embed.*")
        return super().ignored + heads + tuple(f"model.decoder.{h}" for h in heads)

    def tied_heads(self) -> list[tuple[str, str]]:
        """transformers' tied heads as ``(prefix, prefix it is tied to)``: every layer's head to
        layer 0's, or to the decoder's copy with ``with_box_refine`` (boxes) and ``two_stage``
        (classes), and so the decoder's to the head a checkpoint holds in its place."""
        config, pairs = self.config, []
        for kind, in_decoder in (
            ("class_embed", config.two_stage),
            ("bbox_embed", config.with_box_refine),
        ):
            for index in range(config.heads):
                head, decoder = f"{kind}.{index}.", f"model.decoder.{kind}.{index}."
                pairs += (
                    [(head, decoder), (decoder, head)] if in_decoder else [(head, f"{kind}.0.")]
                )
        return pairs

    def sanitize(self, weights: dict) -> dict:
        """DETR's backbone renames; then, as transformers ties the heads, a head the checkpoint
        lacks reads the head it is tied to (one it holds stays its own)."""
        weights = dict(super().sanitize(weights))
        held = list(weights)
        for head, tied_to in self.tied_heads():
            for name in held:
                alias = head + name[len(tied_to) :]
                if name.startswith(tied_to) and alias not in weights:
                    weights[alias] = weights[name]
        return weights

    def predict(self, op, decoded):
        hidden, references, coordinates = decoded
        last = self.config.decoder_layers - 1
        logits = self.class_embed[last](op, hidden)
        boxes = refine(op, self.bbox_embed[last], hidden, references, coordinates)
        return {"logits": logits, "pred_boxes": boxes}


MODEL_TYPES = {"deformable_detr": DeformableDetrForObjectDetection}
