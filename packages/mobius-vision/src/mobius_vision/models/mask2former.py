"""Mask2Former: a registered backbone's maps, a pixel decoder of multi-scale deformable
attention (:mod:`._deformable`) and an FPN, and a masked-attention decoder over learned
queries, each layer's cross-attention limited to the mask the layer before predicted.

The module tree follows ``Mask2FormerForUniversalSegmentation`` checkpoints:
``model.pixel_level_module.encoder`` is the backbone (:mod:`._backbone`);
``...decoder.{input_projections.N, level_embed, encoder.layers.N, adapter_K, layer_K,
mask_projection}`` the pixel decoder; ``model.transformer_module.{queries_embedder,
queries_features, level_embed, input_projections.N, decoder.layers.N, decoder.layernorm,
decoder.mask_predictor.mask_embedder}`` the decoder, whose ``cross_attn`` is torch's
``nn.MultiheadAttention`` (``in_proj_weight`` packs the query, key and value
projections); ``class_predictor``. Outputs are the last layer's: ``class_queries_logits``
and ``masks_queries_logits`` at the pixel decoder's finest map.

The pixel decoder reads the last three backbone maps (transformers fixes three levels,
four points); the FPN adds one level per halving from their finest stride down to
``common_stride``. The graph takes any image size: a Swin backbone (transformers'
``SwinBackbone``) is built in its any-size form (:mod:`._swin_any_size`). Refused in one
line besides the backbones of
:func:`.maskformer.transformers_backbone`: ``pre_norm`` decoders, fewer than three maps, and
strides that are not powers of two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, GroupNorm, LayerNorm, Linear
from mobius.errors import ConfigError
from mobius_vision.models._backbone import backbone
from mobius_vision.models._backbone_config import backbone_config
from mobius_vision.models._conv import Conv2d, Identity, Sequential
from mobius_vision.models._deformable import (
    MultiscaleDeformableAttention,
    flatten_map,
    map_shape,
)
from mobius_vision.models._detr import DetrAttention, FeedForward, sine_positions
from mobius_vision.models.maskformer import (
    FPN_GROUPS,
    checkpoint_ignored,
    conv_norm,
    mask_embedder,
    ones_mask,
    query_masks,
    transformers_backbone,
)
from mobius_vision.tasks.universal_segmentation import UniversalSegmentationModel

#: transformers' fixed numbers: feature levels the attention reads, points per level.
NUM_LEVELS = 3
NUM_POINTS = 4
#: Added to the cross-attention scores outside a query's predicted mask.
MASKED = -1e9


def pixel_level_backbone(model_type: str, hf_config: Any) -> tuple[Any, Any]:
    """``(transformers' backbone config, its family's config)``, refused with fewer than the
    three maps the pixel decoder reads (Mask2Former, OneFormer)."""
    hf_backbone = transformers_backbone(model_type, hf_config)
    if getattr(hf_config, "pre_norm", False):
        raise ConfigError(f"{model_type}: pre_norm decoder layers are not built yet")
    inner = backbone_config(hf_backbone)
    channels = inner.feature_channels() if hasattr(inner, "feature_channels") else []
    if len(channels) < NUM_LEVELS:
        raise ConfigError(
            f"{model_type}: the backbone returns {len(channels)} maps; it needs 3 or more"
        )
    return hf_backbone, inner


@dataclass
class Mask2FormerConfig:
    model_type: str
    backbone_type: str
    backbone: Any  # the backbone family's own config (with out_features)
    num_channels: int = 3
    num_labels: int = 150
    feature_size: int = 256
    mask_feature_size: int = 256
    hidden_dim: int = 256
    encoder_feedforward_dim: int = 1024
    activation_function: str = "relu"
    encoder_layers: int = 6
    decoder_layers: int = 10
    num_attention_heads: int = 8
    dim_feedforward: int = 2048
    enforce_input_projection: bool = False
    num_queries: int = 100
    num_fpn_levels: int = 1

    @classmethod
    def from_hf(cls, hf_config: Any) -> Mask2FormerConfig:
        """Normalise a transformers ``Mask2FormerConfig``; the backbone's through its family."""
        t = hf_config.model_type
        hf_backbone, inner = pixel_level_backbone(t, hf_config)
        config = cls(
            model_type=t,
            backbone_type=hf_backbone.model_type,
            backbone=inner,
            num_channels=int(inner.num_channels),
            num_labels=int(hf_config.num_labels),
            feature_size=int(hf_config.feature_size),
            mask_feature_size=int(hf_config.mask_feature_size),
            hidden_dim=int(hf_config.hidden_dim),
            encoder_feedforward_dim=int(hf_config.encoder_feedforward_dim),
            activation_function=hf_config.activation_function,
            encoder_layers=int(hf_config.encoder_layers),
            decoder_layers=int(hf_config.decoder_layers),
            num_attention_heads=int(hf_config.num_attention_heads),
            dim_feedforward=int(hf_config.dim_feedforward),
            enforce_input_projection=bool(hf_config.enforce_input_projection),
            num_queries=int(hf_config.num_queries),
            num_fpn_levels=fpn_levels(t, hf_config.feature_strides, hf_config.common_stride),
        )
        return config.checked()

    def checked(self) -> Mask2FormerConfig:
        """``self``, after the checks of the values the graph's shapes are made of."""
        t, heads = self.model_type, self.num_attention_heads
        if self.feature_size < 1 or self.feature_size % FPN_GROUPS:
            raise ConfigError(
                f"{t}: feature_size {self.feature_size} does not split into 32 groups"
            )
        for name in ("feature_size", "hidden_dim"):
            if heads < 1 or getattr(self, name) % heads:
                raise ConfigError(
                    f"{t}: {name} {getattr(self, name)} does not split into {heads} heads"
                )
        if self.hidden_dim % 2 or self.feature_size % 2:
            raise ConfigError(f"{t}: sine positions need an even hidden_dim and feature_size")
        for name in ("num_labels", "num_queries", "decoder_layers", "mask_feature_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{t}: {name} must be positive")
        if self.num_fpn_levels > len(self.backbone.feature_channels()):
            raise ConfigError(f"{t}: feature_strides ask for more FPN levels than maps")
        return self


def fpn_levels(owner: str, strides: Any, common_stride: Any) -> int:
    """transformers' ``log2(finest of the last three strides) - log2(common_stride)``, checked."""
    values = [*list(strides)[-NUM_LEVELS:], common_stride]
    if not all(isinstance(s, int) and s > 0 and s & (s - 1) == 0 for s in values):
        raise ConfigError(f"{owner}: feature_strides and common_stride must be powers of two")
    levels = int(math.log2(min(values[:-1])) - math.log2(common_stride))
    if levels < 0:
        raise ConfigError(f"{owner}: common_stride {common_stride} is coarser than the maps")
    return levels


def bilinear_resize_like(op, x, like):
    """``interpolate(x, size=like.shape[-2:], mode="bilinear", align_corners=False)``."""
    return op.Resize(
        x,
        None,
        None,
        op.Shape(like, start=2, end=4),
        axes=[2, 3],
        mode="linear",
        coordinate_transformation_mode="half_pixel",
    )


def reference_points(op, level_shapes, like):
    """``[1, sequence, 1, 2]``: each level's pixel centres ``((x + 0.5) / w, (y + 0.5) / h)``,
    row by row, level after level (no padding: every valid ratio is 1). Made in float32
    (ONNX Runtime has no float16 Range), then cast to ``like``'s dtype."""
    points = []
    for height, width in level_shapes:
        axes = []
        for size in (height, width):
            size = op.Squeeze(op.Cast(size, to=ir.DataType.FLOAT), [0])
            steps = op.Range(op.Constant(value_float=0.5), size, op.Constant(value_float=1.0))
            axes.append(op.Div(steps, size))
        ys, xs = axes
        grid = op.Concat(op.Shape(ys), op.Shape(xs), axis=0)
        xs = op.Expand(op.Unsqueeze(xs, [0]), grid)
        ys = op.Expand(op.Unsqueeze(ys, [1]), grid)
        pair = op.Concat(op.Unsqueeze(xs, [-1]), op.Unsqueeze(ys, [-1]), axis=-1)
        points.append(op.Reshape(pair, op.Constant(value_ints=[-1, 2])))
    points = op.Reshape(op.Concat(*points, axis=0), op.Constant(value_ints=[1, -1, 1, 2]))
    return op.CastLike(points, like)


class Mask2FormerPixelDecoderEncoderLayer(FeedForward):
    """Deformable self-attention over every level's pixels, then a ReLU feed-forward; each
    post-normed."""

    def __init__(self, config: Mask2FormerConfig) -> None:
        width = config.feature_size
        super().__init__(
            SimpleNamespace(d_model=width, activation_function="relu"),
            config.encoder_feedforward_dim,
        )
        heads = config.num_attention_heads
        self.self_attn = MultiscaleDeformableAttention(width, heads, NUM_LEVELS, NUM_POINTS)
        self.self_attn_layer_norm = LayerNorm(width)

    def forward(self, op, hidden, positions, points, level_shapes):
        attended = self.self_attn(op, hidden, hidden, points, level_shapes, positions=positions)
        hidden = self.self_attn_layer_norm(op, op.Add(hidden, attended))
        return self.feed_forward(op, hidden)


class Mask2FormerPixelDecoderEncoderOnly(nn.Module):
    def __init__(self, config: Mask2FormerConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [Mask2FormerPixelDecoderEncoderLayer(config) for _ in range(config.encoder_layers)]
        )

    def forward(self, op, hidden, positions, level_shapes):
        points = reference_points(op, level_shapes, hidden)
        for layer in self.layers:
            hidden = layer(op, hidden, positions, points, level_shapes)
        return hidden


class Mask2FormerPixelDecoder(nn.Module):
    """The deformable encoder over the last three maps (coarsest first), then the FPN down to
    ``common_stride``: ``(mask features, the three encoded maps)``."""

    def __init__(self, config: Mask2FormerConfig, channels: list[int]) -> None:
        super().__init__()
        width = config.feature_size
        self.config = config
        self.level_embed = nn.Parameter([NUM_LEVELS, width])
        self.input_projections = nn.ModuleList(
            [
                Sequential([Conv2d(c, width, 1), GroupNorm(FPN_GROUPS, width)])
                for c in reversed(channels[-NUM_LEVELS:])
            ]
        )
        self.encoder = Mask2FormerPixelDecoderEncoderOnly(config)
        self.mask_projection = Conv2d(width, config.mask_feature_size, 1)
        for index, c in enumerate(channels[: config.num_fpn_levels], start=1):
            setattr(self, f"adapter_{index}", conv_norm(c, width, 1, relu=False))
            setattr(self, f"layer_{index}", conv_norm(width, width, 3, relu=True))

    def forward(self, op, maps: list):
        width = self.config.feature_size
        levels = [
            proj(op, x)
            for proj, x in zip(self.input_projections, reversed(maps[-NUM_LEVELS:]), strict=True)
        ]
        level_shapes = [map_shape(op, x) for x in levels]
        positions = [
            op.Add(
                sine_positions(op, ones_mask(op, x), width // 2, x),
                op.Gather(self.level_embed, op.Constant(value_ints=[i]), axis=0),
            )
            for i, x in enumerate(levels)
        ]
        hidden = op.Concat(*(flatten_map(op, x) for x in levels), axis=1)
        hidden = self.encoder(op, hidden, op.Concat(*positions, axis=1), level_shapes)
        sizes = op.Concat(*(op.Mul(h, w) for h, w in level_shapes), axis=0)
        pieces = op.Split(hidden, sizes, axis=1, _outputs=NUM_LEVELS)
        outputs = []
        for piece, (h, w) in zip(pieces, level_shapes, strict=True):
            grid = op.Concat(op.Constant(value_ints=[0, width]), h, w, axis=0)
            outputs.append(op.Reshape(op.Transpose(piece, perm=[0, 2, 1]), grid))
        finest = outputs[-1]
        for index in range(self.config.num_fpn_levels, 0, -1):  # coarse to fine
            lateral = getattr(self, f"adapter_{index}")(op, maps[index - 1])
            finest = op.Add(lateral, bilinear_resize_like(op, finest, lateral))
            finest = getattr(self, f"layer_{index}")(op, finest)
        return self.mask_projection(op, finest), outputs


class Mask2FormerPixelLevelModule(nn.Module):
    def __init__(self, config: Mask2FormerConfig) -> None:
        super().__init__()
        self.encoder = backbone(config.backbone_type, config.backbone, any_size=True)
        self.decoder = Mask2FormerPixelDecoder(config, config.backbone.feature_channels())

    def forward(self, op, pixel_values):
        return self.decoder(op, self.encoder(op, pixel_values))


class PackedMultiheadAttention(nn.Module):
    """torch's ``nn.MultiheadAttention``: one ``in_proj_weight`` (query, key, value rows)."""

    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.in_proj_weight = nn.Parameter([3 * dim, dim])
        self.in_proj_bias = nn.Parameter([3 * dim])
        self.out_proj = Linear(dim, dim, bias=True)
        self.dim, self.num_heads = dim, num_heads

    def project(self, op, x, part: int):
        start, end = [part * self.dim], [(part + 1) * self.dim]
        weight = op.Slice(self.in_proj_weight, start, end, [0])
        bias = op.Slice(self.in_proj_bias, start, end, [0])
        return op.Add(op.MatMul(x, op.Transpose(weight, perm=[1, 0])), bias)

    def forward(self, op, query, key, value, bias):
        q, k, v = (self.project(op, x, i) for i, x in enumerate((query, key, value)))
        heads = self.num_heads
        scale = (self.dim // heads) ** -0.5
        out = op.Attention(q, k, v, bias, q_num_heads=heads, kv_num_heads=heads, scale=scale)
        return self.out_proj(op, out)


class Mask2FormerMaskedAttentionDecoderLayer(FeedForward):
    """Masked cross-attention to one level, self-attention over the queries, feed-forward;
    each post-normed."""

    def __init__(self, config: Mask2FormerConfig) -> None:
        d = config.hidden_dim
        feed_forward = SimpleNamespace(d_model=d, activation_function=config.activation_function)
        super().__init__(feed_forward, config.dim_feedforward)
        self.cross_attn = PackedMultiheadAttention(d, config.num_attention_heads)
        self.cross_attn_layer_norm = LayerNorm(d)
        self.self_attn = DetrAttention(d, config.num_attention_heads)
        self.self_attn_layer_norm = LayerNorm(d)

    def forward(self, op, hidden, memory, memory_positions, query_positions, mask_bias):
        attended = self.cross_attn(
            op, op.Add(hidden, query_positions), op.Add(memory, memory_positions), memory, mask_bias
        )
        hidden = self.cross_attn_layer_norm(op, op.Add(hidden, attended))
        attended = self.self_attn(op, hidden, hidden, None, query_positions, query_positions)
        hidden = self.self_attn_layer_norm(op, op.Add(hidden, attended))
        return self.feed_forward(op, hidden)


class Mask2FormerMaskPredictor(nn.Module):
    """Each query's mask logits, and the attention bias the next layer reads from them."""

    def __init__(self, config: Mask2FormerConfig) -> None:
        super().__init__()
        d = config.hidden_dim
        self.mask_embedder = mask_embedder(d, d, config.mask_feature_size)

    def forward(self, op, states, pixel_embeddings, level_map):
        """``(masks [batch, queries, h, w], bias [batch, 1, queries, level pixels])``: the
        bias is ``MASKED`` where the mask, resized to the level's map, has sigmoid < 0.5,
        except in a query's row that would mask every pixel (transformers unmasks those)."""
        masks = query_masks(op, self.mask_embedder(op, states), pixel_embeddings)
        resized = op.Sigmoid(bilinear_resize_like(op, masks, level_map))
        outside = op.Less(
            op.Reshape(resized, op.Constant(value_ints=[0, 0, -1])), op.CastLike(0.5, resized)
        )
        as_number = op.Cast(outside, to=ir.DataType.FLOAT)
        everywhere = op.ReduceMin(as_number, op.Constant(value_ints=[-1]), keepdims=1)
        outside = op.And(outside, op.Not(op.Cast(everywhere, to=ir.DataType.BOOL)))
        zero = op.CastLike(op.Constant(value=ir.tensor(np.float32(0.0))), masks)
        bias = op.Where(outside, op.CastLike(op.Constant(value_float=MASKED), masks), zero)
        return masks, op.Unsqueeze(bias, [1])


class Mask2FormerMaskedAttentionDecoder(nn.Module):
    def __init__(self, config: Mask2FormerConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [
                Mask2FormerMaskedAttentionDecoderLayer(config)
                for _ in range(config.decoder_layers - 1)
            ]
        )
        self.layernorm = LayerNorm(config.hidden_dim)
        self.mask_predictor = Mask2FormerMaskPredictor(config)

    def forward(
        self, op, queries, query_positions, memories, memory_positions, level_maps, pixel_embeddings
    ):
        """``(last states after the final LayerNorm, their masks)``; layer ``i`` attends to
        level ``i % 3`` under the mask the states before it predicted."""
        hidden = queries
        states = self.layernorm(op, hidden)
        masks, bias = self.mask_predictor(op, states, pixel_embeddings, level_maps[0])
        for index, layer in enumerate(self.layers):
            level = index % NUM_LEVELS
            hidden = layer(
                op, hidden, memories[level], memory_positions[level], query_positions, bias
            )
            states = self.layernorm(op, hidden)
            following = level_maps[(index + 1) % NUM_LEVELS]
            masks, bias = self.mask_predictor(op, states, pixel_embeddings, following)
        return states, masks


class Mask2FormerTransformerModule(nn.Module):
    def __init__(self, config: Mask2FormerConfig) -> None:
        super().__init__()
        d, queries = config.hidden_dim, config.num_queries
        self.config = config
        self.queries_embedder = Embedding(queries, d)
        self.queries_features = Embedding(queries, d)
        project = config.feature_size != d or config.enforce_input_projection
        self.input_projections = nn.ModuleList(
            [
                Conv2d(config.feature_size, d, 1) if project else Identity()
                for _ in range(NUM_LEVELS)
            ]
        )
        self.decoder = Mask2FormerMaskedAttentionDecoder(config)
        self.level_embed = Embedding(NUM_LEVELS, d)

    def table(self, op, embedding, like):
        """The ``[batch, queries, d]`` rows of ``embedding``, one copy per image."""
        rows = embedding(op, op.Constant(value_ints=list(range(self.config.num_queries))))
        batch = op.Shape(like, start=0, end=1)
        return op.Expand(
            op.Unsqueeze(rows, [0]), op.Concat(batch, op.Constant(value_ints=[1, 1]), axis=0)
        )

    def forward(self, op, level_maps: list, pixel_embeddings):
        d = self.config.hidden_dim
        memories, positions = [], []
        for i, (project, x) in enumerate(zip(self.input_projections, level_maps, strict=True)):
            positions.append(sine_positions(op, ones_mask(op, x), d // 2, x))
            level = self.level_embed(op, op.Constant(value_ints=[i]))  # [1, d]
            memories.append(op.Add(flatten_map(op, project(op, x)), level))
        queries = self.table(op, self.queries_features, pixel_embeddings)
        query_positions = self.table(op, self.queries_embedder, pixel_embeddings)
        return self.decoder(
            op, queries, query_positions, memories, positions, level_maps, pixel_embeddings
        )


class Mask2FormerModel(nn.Module):
    def __init__(self, config: Mask2FormerConfig) -> None:
        super().__init__()
        self.pixel_level_module = Mask2FormerPixelLevelModule(config)
        self.transformer_module = Mask2FormerTransformerModule(config)

    def forward(self, op, pixel_values):
        pixel_embeddings, level_maps = self.pixel_level_module(op, pixel_values)
        return self.transformer_module(op, level_maps, pixel_embeddings)


class Mask2FormerForUniversalSegmentation(UniversalSegmentationModel):
    """``pixel_values`` -> ``class_queries_logits``, ``masks_queries_logits`` (the last layer's)."""

    config_class = Mask2FormerConfig

    def __init__(self, config: Mask2FormerConfig) -> None:
        super().__init__()
        self.config = config
        self.model = Mask2FormerModel(config)
        self.class_predictor = Linear(config.hidden_dim, self.num_classes(), bias=True)

    def num_queries(self) -> int:
        return self.config.num_queries

    @property
    def ignored(self) -> tuple[str, ...]:
        return checkpoint_ignored(self.model.pixel_level_module.encoder)

    def forward(self, op, pixel_values):
        states, masks = self.model(op, pixel_values)
        return {
            "class_queries_logits": self.class_predictor(op, states),
            "masks_queries_logits": masks,
        }


MODEL_TYPES = {"mask2former": Mask2FormerForUniversalSegmentation}
