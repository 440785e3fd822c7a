"""Grounding DINO: open-set object detection from a text prompt (zero-shot-object-detection).

The prompt ("a cat. a remote control.") is one BERT sequence; each phrase between the
delimiters ``[CLS]``, ``[SEP]``, ``.`` and ``?`` attends only to itself, and its tokens count
their positions from the phrase's start (transformers'
``generate_masks_with_special_tokens_and_transfer_map``, computed here in the text graph).
BERT is mobius-text's (:mod:`mobius_text.models.bert`, under ``model.text_backbone``),
projected to ``d_model`` (:mod:`._grounding_dino_text`).

The image graph runs the backbone (whatever mobius registers for ``backbone_config``:
Swin for the hub's checkpoints, ResNet..., in its any-size form: the processor resizes
each image by its edges, so the graph takes any height and width), projects its maps
(and extra stride-2 levels) to ``d_model``, and runs the encoder, whose layers fuse pixels
and tokens both ways (:mod:`._grounding_dino_layers`), the text-aware query selection (the pixels whose best
token scores highest become the decoder's boxes), and the decoder, which refines the
boxes layer by layer while attending to the tokens and, deformably, to the pixels (the
geometry of the levels, proposals and boxes: :mod:`._grounding_dino_geometry`).
``logits`` [batch, queries, max_text_len] score each query against each token (``-inf``
on padded tokens and past the prompt), ``pred_boxes`` are normalised ``(cx, cy, w, h)``.
The graphs are the contract's grounded variant
(:mod:`mobius_vision.tasks.zero_shot_detection`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Conv2d,
    Embedding,
    GroupNorm,
    LayerNorm,
    Linear,
    module_scope,
    padding_bias,
)
from mobius.errors import ConfigError
from mobius_text.models.bert import BertConfig
from mobius_vision.models._backbone import backbone
from mobius_vision.models._conv import BATCHNORM_COUNTERS, Sequential
from mobius_vision.models._deformable import flatten_map, map_shape
from mobius_vision.models._detr import (
    TIMM_BACKBONE,
    DetrMLPPredictionHead,
    detection_backbone,
    downsample_mask,
    float_constant,
    sine_of_points,
    sine_positions,
)
from mobius_vision.models._grounding_dino_geometry import (
    encoder_proposals,
    encoder_reference_points,
    flat_mask,
    gather_rows,
    logit,
    valid_ratios,
)
from mobius_vision.models._grounding_dino_layers import (
    GroundingDinoDecoderLayer,
    GroundingDinoEncoderLayer,
)
from mobius_vision.models._grounding_dino_text import (
    PHRASE_DELIMITERS,
    GroundingDinoTextBackbone,
    attention_bias,
    phrase_masks,
    text_position_sines,
)
from mobius_vision.tasks.zero_shot_detection import GroundedDetectionModel

#: GroupNorm's groups after each level's projection (transformers' ``nn.GroupNorm(32, d_model)``).
PROJECTION_GROUPS = 32
#: Checkpoint tensors no graph reads: Swin's index buffers, BERT's position ids and pooler
#: (which older conversions saved).
_BACKBONE_UNREAD = (
    "model.backbone.conv_encoder.model.*.relative_position_index",
    "model.text_backbone.embeddings.position_ids",
    "model.text_backbone.pooler.*",
)


@dataclass
class GroundingDinoConfig:
    """The transformer's sizes, the backbone's and BERT's configs."""

    model_type: str
    backbone_type: str
    backbone: Any
    text: BertConfig
    num_channels: int = 3
    d_model: int = 256
    encoder_layers: int = 6
    decoder_layers: int = 6
    encoder_ffn_dim: int = 2048
    decoder_ffn_dim: int = 2048
    encoder_attention_heads: int = 8
    decoder_attention_heads: int = 8
    num_queries: int = 900
    num_feature_levels: int = 4
    encoder_n_points: int = 4
    decoder_n_points: int = 4
    max_text_len: int = 256
    activation_function: str = "relu"
    positional_embedding_temperature: float = 20.0
    layer_norm_eps: float = 1e-5
    decoder_bbox_embed_share: bool = True
    phrase_delimiters: tuple[int, ...] = field(default=PHRASE_DELIMITERS)

    @classmethod
    def from_hf(cls, hf_config: Any) -> GroundingDinoConfig:
        """Normalise a transformers config object (refusing the variants not built)."""
        refuse_unbuilt(hf_config)
        if getattr(hf_config.backbone_config, "model_type", None) == TIMM_BACKBONE:
            raise ConfigError(f"{hf_config.model_type}: a timm backbone is not built yet")
        backbone_type, backbone = detection_backbone(hf_config.backbone_config)
        text_type = getattr(hf_config.text_config, "model_type", None)
        if text_type != "bert":
            raise ConfigError(f"{hf_config.model_type}: text_config {text_type!r} is not BERT")
        fields = dict(
            model_type=hf_config.model_type,
            backbone_type=backbone_type,
            backbone=backbone,
            text=BertConfig.from_hf(hf_config.text_config),
            num_channels=int(backbone.num_channels),
            activation_function=hf_config.activation_function,
            positional_embedding_temperature=float(hf_config.positional_embedding_temperature),
            layer_norm_eps=float(hf_config.layer_norm_eps),
            decoder_bbox_embed_share=bool(hf_config.decoder_bbox_embed_share),
        )
        for name in _COUNTS:
            value = getattr(hf_config, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(
                    f"{hf_config.model_type}: {name} must be a positive int, not {value!r}"
                )
            fields[name] = value
        return cls(**fields)

    def __post_init__(self) -> None:
        d = self.d_model
        for heads in ("encoder_attention_heads", "decoder_attention_heads"):
            if d % getattr(self, heads):
                raise ConfigError(f"d_model {d} does not split into {heads}")
        if d % PROJECTION_GROUPS:
            raise ConfigError(f"d_model {d} must be a multiple of {PROJECTION_GROUPS} (GroupNorm)")
        if self.encoder_attention_heads < 2 or (self.encoder_ffn_dim // 2) % (
            self.encoder_attention_heads // 2
        ):
            raise ConfigError(
                "the fusion layer's width (encoder_ffn_dim / 2) must split into "
                "encoder_attention_heads / 2 heads"
            )
        levels = len(self.backbone.feature_channels())
        if self.num_feature_levels < levels:
            raise ConfigError(
                f"num_feature_levels {self.num_feature_levels} is fewer than the backbone's "
                f"{levels} maps"
            )


_COUNTS = (
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "num_queries",
    "num_feature_levels",
    "encoder_n_points",
    "decoder_n_points",
    "max_text_len",
)


def refuse_unbuilt(hf_config: Any) -> None:
    """ConfigError for the settings no hub checkpoint uses and this build does not follow."""
    name = hf_config.model_type
    if not hf_config.two_stage:
        raise ConfigError(f"{name}: two_stage=False (learned reference points) is not built")
    if not hf_config.embedding_init_target:
        raise ConfigError(f"{name}: embedding_init_target=False is not built")
    if getattr(hf_config, "two_stage_bbox_embed_share", False):  # not in MM's config
        raise ConfigError(f"{name}: two_stage_bbox_embed_share=True is not built")
    if hf_config.position_embedding_type != "sine":
        raise ConfigError(
            f"{name}: position_embedding_type {hf_config.position_embedding_type!r} is not sine"
        )
    if hf_config.query_dim != 4:
        raise ConfigError(f"{name}: query_dim {hf_config.query_dim} is not 4 (boxes)")


class GroundingDinoContrastiveEmbedding(nn.Module):
    """``[batch, queries, max_text_len]``: each query's dot product with each token, ``-inf``
    on padded tokens and on the columns past the prompt (no parameters)."""

    def __init__(self, max_text_len: int) -> None:
        super().__init__()
        self.max_text_len = max_text_len

    def scores(self, op, queries, text):
        """The raw scores ``[batch, queries, tokens]``."""
        return op.MatMul(queries, op.Transpose(text, perm=[0, 2, 1]))

    def forward(self, op, queries, text, text_padding):
        scores = self.scores(op, queries, text)
        minus_inf = float_constant(op, -np.inf, scores)
        scores = op.Where(op.Unsqueeze(text_padding, [1]), minus_inf, scores)
        missing = op.Sub(
            op.Constant(value_ints=[self.max_text_len]), op.Shape(text, start=1, end=2)
        )
        pads = op.Concat(op.Constant(value_ints=[0, 0, 0, 0, 0]), missing, axis=0)
        return op.Pad(scores, pads, minus_inf)


class GroundingDinoEncoder(nn.Module):
    def __init__(self, config: GroundingDinoConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [GroundingDinoEncoderLayer(config) for _ in range(config.encoder_layers)]
        )

    def forward(self, op, vision, text, streams):
        for layer in self.layers:
            vision, text = layer(op, vision, text, streams)
        return vision, text


class GroundingDinoDecoder(nn.Module):
    """The layers and their final norm; the query positions come from each layer's boxes.
    (The box heads that refine the boxes between the layers are the top module's
    ``bbox_embed``: :meth:`GroundingDinoForObjectDetection.decode` runs the loop.)"""

    def __init__(self, config: GroundingDinoConfig) -> None:
        super().__init__()
        d = config.d_model
        self.config = config
        self.layers = nn.ModuleList(
            [GroundingDinoDecoderLayer(config) for _ in range(config.decoder_layers)]
        )
        self.layer_norm = LayerNorm(d, config.layer_norm_eps)
        self.reference_points_head = DetrMLPPredictionHead(2 * d, d, d, 2)

    def layer_inputs(self, op, boxes, ratios):
        """``(references [b, q, levels, 4], query positions [b, q, d_model])`` of the boxes
        ``[b, q, 4]``: each box scaled to every level's image part, and the MLP of the sine
        of the first level's."""
        level_ratios = op.Unsqueeze(op.Concat(ratios, ratios, axis=-1), [1])  # [b, 1, levels, 4]
        references = op.Mul(op.Unsqueeze(boxes, [2]), level_ratios)
        first = op.Gather(references, op.Constant(value_int=0), axis=2)
        sines = sine_of_points(op, first, self.config.d_model // 2, 4)
        return references, self.reference_points_head(op, sines)


class GroundingDinoConvEncoder(nn.Module):
    """``backbone.conv_encoder``: the registered backbone under ``model``, in its any-size
    form (the processor resizes each image by its edges)."""

    def __init__(self, config: GroundingDinoConfig) -> None:
        super().__init__()
        self.model = backbone(config.backbone_type, config.backbone, any_size=True)

    def forward(self, op, pixel_values) -> list:
        return self.model(op, pixel_values)


class GroundingDinoConvModel(nn.Module):
    """``model.backbone``: the checkpoint's layout (transformers' ``GroundingDinoConvModel``)."""

    def __init__(self, config: GroundingDinoConfig) -> None:
        super().__init__()
        self.conv_encoder = GroundingDinoConvEncoder(config)

    def forward(self, op, pixel_values) -> list:
        return self.conv_encoder(op, pixel_values)


class GroundingDinoModel(nn.Module):
    """``model``: backbone, projections, text projection, encoder, query selection, decoder."""

    #: How the proposals and the queries are scored against the tokens.
    contrastive_class = GroundingDinoContrastiveEmbedding

    def __init__(self, config: GroundingDinoConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.backbone = GroundingDinoConvModel(config)
        channels = config.backbone.feature_channels()
        projections = [
            Sequential([Conv2d(c, d, 1), GroupNorm(PROJECTION_GROUPS, d)]) for c in channels
        ]
        in_channels = channels[-1]
        for _ in range(config.num_feature_levels - len(channels)):
            projections.append(
                Sequential(
                    [
                        Conv2d(in_channels, d, 3, stride=2, padding=1),
                        GroupNorm(PROJECTION_GROUPS, d),
                    ]
                )
            )
            in_channels = d
        self.input_proj_vision = nn.ModuleList(projections)
        self.text_backbone = GroundingDinoTextBackbone(config.text)
        self.text_projection = Linear(config.text.hidden_size, d, bias=True)
        self.query_position_embeddings = Embedding(config.num_queries, d)
        self.encoder = GroundingDinoEncoder(config)
        self.decoder = GroundingDinoDecoder(config)
        self.level_embed = nn.Parameter([config.num_feature_levels, d])
        self.enc_output = Linear(d, d, bias=True)
        self.enc_output_norm = LayerNorm(d, config.layer_norm_eps)
        self.encoder_output_bbox_embed = DetrMLPPredictionHead(d, d, 4, 3)
        self.encoder_output_class_embed = self.contrastive_class(config.max_text_len)

    def encode_text(self, op, input_ids):
        """``(text features [b, seq, d_model], phrase mask, position ids)``."""
        mask, positions = phrase_masks(op, input_ids, self.config.phrase_delimiters)
        hidden = self.text_backbone(op, input_ids, mask, positions)
        return self.text_projection(op, hidden), mask, positions

    def levels(self, op, pixel_values, pixel_mask):
        """``(maps [b, d, h, w], masks [b, h, w] float)`` of every level."""
        maps = self.backbone(op, pixel_values)
        projections = list(self.input_proj_vision)
        levels = [proj(op, m) for proj, m in zip(projections, maps)]  # noqa: B905 (extra levels)
        for index, proj in enumerate(projections[len(maps) :]):
            # the first extra level reads the backbone's last map, the next ones the level before
            levels.append(proj(op, maps[-1] if index == 0 else levels[-1]))
        masks = [op.CastLike(downsample_mask(op, pixel_mask, level), level) for level in levels]
        return levels, masks

    def forward(self, op, pixel_values, pixel_mask, text, text_mask, phrase_mask, text_positions):
        c = self.config
        levels, masks = self.levels(op, pixel_values, pixel_mask)
        level_shapes = [map_shape(op, level) for level in levels]
        vision = op.Concat(*(flatten_map(op, level) for level in levels), axis=1)
        temperature = c.positional_embedding_temperature
        positions = [
            op.Add(
                sine_positions(op, mask, c.d_model // 2, vision, (temperature, temperature)),
                op.Gather(self.level_embed, op.Constant(value_int=index), axis=0),
            )
            for index, mask in enumerate(masks)
        ]
        pixel_mask_flat = op.Concat(*(flat_mask(op, m) for m in masks), axis=1)
        ratios = op.Concat(*(op.Unsqueeze(valid_ratios(op, m), [1]) for m in masks), axis=1)
        text_padding = op.Not(op.Cast(text_mask, to=ir.DataType.BOOL))
        streams = SimpleNamespace(
            level_shapes=level_shapes,
            pixel_mask=pixel_mask_flat,
            pixel_padding=op.Not(op.Cast(pixel_mask_flat, to=ir.DataType.BOOL)),
            pixel_positions=op.Concat(*positions, axis=1),
            reference_points=encoder_reference_points(op, level_shapes, ratios, vision),
            text_padding=text_padding,
            phrase_bias=attention_bias(op, phrase_mask, vision),
            text_positions=text_position_sines(op, text_positions, c.d_model, vision),
        )
        memory, text = self.encoder(op, vision, text, streams)
        # query selection: each usable pixel as a proposal, scored by its best token
        proposals, usable = encoder_proposals(op, level_shapes, masks, memory)
        zero = float_constant(op, 0.0, memory)
        queries = self.enc_output_norm(op, self.enc_output(op, op.Where(usable, memory, zero)))
        scores = self.encoder_output_class_embed(op, queries, text, text_padding)
        best = op.ReduceMax(scores, op.Constant(value_ints=[-1]), keepdims=0)
        count = op.Constant(value_ints=[c.num_queries])
        _, chosen = op.TopK(best, count, axis=1, largest=1, sorted=1, _outputs=2)
        boxes = op.Add(self.encoder_output_bbox_embed(op, queries), proposals)
        boxes = op.Sigmoid(gather_rows(op, boxes, chosen))
        table = self.query_position_embeddings(
            op, op.Constant(value_ints=list(range(c.num_queries)))
        )
        batch = op.Shape(memory, start=0, end=1)
        target = op.Expand(
            op.Unsqueeze(table, [0]), op.Concat(batch, op.Constant(value_ints=[1, 1]), axis=0)
        )
        # the decoder's queries attend to the real tokens only
        streams.text_bias = padding_bias(op, text_mask, pixel_values.dtype, target)
        return memory, text, text_padding, target, boxes, ratios, streams


@contextmanager
def scope_without_parameters(op, module: nn.Module) -> Iterator[None]:
    """:func:`~mobius.components.module_scope` of one module without realizing its own
    parameters: the text graph reads none of ``model``'s own (``level_embed`` is the image
    graph's; realized here it would be an unused initializer of the text graph)."""
    op.builder.push_module(module._name or "", type(module).__qualname__)  # noqa: SLF001
    try:
        yield
    finally:
        op.builder.pop_module()


class GroundingDinoForObjectDetection(GroundedDetectionModel):
    """``model`` and the per-layer box heads ``bbox_embed`` (one shared head when
    ``decoder_bbox_embed_share``; the class heads have no parameters)."""

    config_class = GroundingDinoConfig
    model_class = GroundingDinoModel

    def __init__(self, config: GroundingDinoConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.model = self.model_class(config)
        heads = 1 if config.decoder_bbox_embed_share else config.decoder_layers
        self.bbox_embed = nn.ModuleList([DetrMLPPredictionHead(d, d, 4, 3) for _ in range(heads)])
        # the last layer's class head scores the queries (earlier ones feed the training loss)
        self.class_embed = nn.ModuleList([self.model_class.contrastive_class(config.max_text_len)])

    def box_heads(self) -> list:
        """The box head of each decoder layer."""
        heads = list(self.bbox_embed)
        return heads * self.config.decoder_layers if len(heads) == 1 else heads

    def text_outputs(self) -> dict[str, tuple[ir.DataType | None, list]]:
        """The text graph's outputs: dtype (``None``: the model's float) and shape."""
        return {
            "text_features": (None, ["batch", "sequence", self.config.d_model]),
            "text_self_attention_mask": (ir.DataType.BOOL, ["batch", "sequence", "sequence"]),
            "text_position_ids": (ir.DataType.INT64, ["batch", "sequence"]),
        }

    def image_outputs(self) -> dict[str, list]:
        queries = self.config.num_queries
        return {
            "logits": ["batch", queries, self.config.max_text_len],
            "pred_boxes": ["batch", queries, 4],
        }

    def encode_text(self, op, input_ids, attention_mask) -> dict:
        """The text graph's outputs (:meth:`text_outputs`); ``attention_mask`` is unread:
        padding is a phrase of its own, and the image graph takes the mask."""
        with scope_without_parameters(op, self.model):
            features, mask, positions = self.model.encode_text(op, input_ids)
        return dict(
            text_features=features, text_self_attention_mask=mask, text_position_ids=positions
        )

    def detect(self, op, pixel_values, pixel_mask, text: dict) -> dict:
        """The image graph's outputs from the pixels and the text graph's outputs (plus the
        prompt's ``attention_mask``)."""
        memory, text_states, text_padding, target, boxes, ratios, streams = self.model(
            op,
            pixel_values,
            pixel_mask,
            text["text_features"],
            text["attention_mask"],
            text["text_self_attention_mask"],
            text["text_position_ids"],
        )
        hidden, read = self.decode(op, target, boxes, memory, text_states, ratios, streams)
        with module_scope(op, self.model, self.model.decoder):
            normed = self.model.decoder.layer_norm(op, hidden)
        logits = self.class_embed[-1](op, normed, text_states, text_padding)
        boxes = op.Sigmoid(op.Add(self.box_heads()[-1](op, normed), logit(op, read)))
        return {"logits": logits, "pred_boxes": boxes}

    def decode(self, op, hidden, boxes, memory, text, ratios, streams):
        """The decoder's layers, each followed by its box head refining the boxes in logit
        space: ``(the last layer's states, the boxes it read)``."""
        decoder = self.model.decoder
        read = boxes
        for layer, box_head in zip(decoder.layers, self.box_heads(), strict=True):
            with module_scope(op, self.model, decoder):
                references, positions = decoder.layer_inputs(op, boxes, ratios)
                hidden = layer(
                    op, hidden, positions, memory, text, streams.text_bias, references, streams
                )
            read = boxes
            boxes = op.Sigmoid(op.Add(box_head(op, hidden), logit(op, boxes)))
        return hidden, read

    @property
    def ignored(self) -> tuple[str, ...]:
        """The backbone's unread tensors, BatchNorm counters, and the checkpoint's copies of
        the box heads (the decoder's, and every layer's when they are one shared head)."""
        backbone = self.model.backbone.conv_encoder.model
        prefix = "model.backbone.conv_encoder.model."
        own = tuple(prefix + pattern for pattern in getattr(backbone, "ignored", ()))
        copies = ["model.decoder.bbox_embed.*"]
        if self.config.decoder_bbox_embed_share:
            copies += [f"bbox_embed.{i}.*" for i in range(1, self.config.decoder_layers)]
        return (BATCHNORM_COUNTERS, *_BACKBONE_UNREAD, *own, *copies)


MODEL_TYPES = {"grounding-dino": GroundingDinoForObjectDetection}
