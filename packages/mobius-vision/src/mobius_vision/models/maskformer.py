"""MaskFormer: a registered backbone's maps, an FPN pixel decoder, a DETR decoder over learned
queries, and per-query class and mask heads (universal segmentation).

The module tree follows ``MaskFormerForInstanceSegmentation`` checkpoints:
``model.pixel_level_module.encoder`` is the ``backbone_class`` of the family
``backbone_config`` names (ResNet's, through :mod:`._backbone`),
``model.pixel_level_module.decoder.fpn.{stem,layers.N.proj,layers.N.block}`` the FPN
(conv, GroupNorm(32)[, ReLU]), ``...decoder.mask_projection``,
``model.transformer_module.{queries_embedder,input_projection,decoder}`` (the decoder is
DETR's, :mod:`._detr`, over no padding mask), ``class_predictor`` and
``mask_embedder.N.0``. The masks are each query's embedding dotted with the pixel
embeddings: ``[batch, queries, h, w]`` at the FPN's finest map.

The graph takes any image size: a backbone family built for one size (Swin) is put under
in its any-size form (``backbone(..., any_size=True)``). A ``swin`` backbone_config becomes
MaskFormer's own Swin (:mod:`.maskformer_swin`, all four stages out), as transformers swaps it
(:func:`maskformer_backbone`).

Refused in one line: a timm backbone or one named only by ``backbone`` (weights mobius does
not map), and ``use_auxiliary_loss`` (transformers then reads the class and masks from the
last layer's states before the decoder's final LayerNorm).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Embedding, GroupNorm, Linear
from mobius.errors import ConfigError
from mobius_vision.models._backbone import backbone
from mobius_vision.models._backbone_config import backbone_config
from mobius_vision.models._conv import BATCHNORM_COUNTERS, Activation, Conv2d, Sequential
from mobius_vision.models._detr import DetrDecoder, sine_positions
from mobius_vision.tasks.universal_segmentation import UniversalSegmentationModel

#: transformers' FPN normalises with GroupNorm of this many groups.
FPN_GROUPS = 32
#: The maps transformers takes from a ``swin`` backbone under MaskFormer.
MASKFORMER_SWIN_STAGES = ("stage1", "stage2", "stage3", "stage4")
#: The decoder families a MaskFormer config may name (``decoder_config.model_type``).
DECODER_TYPES = ("detr",)


@dataclass
class MaskFormerDecoderConfig:
    """What DETR's decoder (:class:`~._detr.DetrDecoder`) reads of a MaskFormer's ``decoder_config``."""

    d_model: int
    decoder_layers: int
    decoder_attention_heads: int
    decoder_ffn_dim: int
    activation_function: str
    num_queries: int

    @classmethod
    def from_hf(cls, hf_decoder: Any, owner: str) -> MaskFormerDecoderConfig:
        kind = getattr(hf_decoder, "model_type", None)
        if kind not in DECODER_TYPES:
            raise ConfigError(f"{owner}: decoder_config {kind!r} is not a DETR decoder")
        config = cls(
            d_model=int(hf_decoder.d_model),
            decoder_layers=int(hf_decoder.decoder_layers),
            decoder_attention_heads=int(hf_decoder.decoder_attention_heads),
            decoder_ffn_dim=int(hf_decoder.decoder_ffn_dim),
            activation_function=hf_decoder.activation_function,
            num_queries=int(hf_decoder.num_queries),
        )
        heads = config.decoder_attention_heads
        if heads < 1 or config.d_model % heads:
            raise ConfigError(
                f"{owner}: d_model {config.d_model} does not split into {heads} heads"
            )
        for name in ("decoder_layers", "num_queries", "decoder_ffn_dim"):
            if getattr(config, name) < 1:
                raise ConfigError(f"{owner}: decoder_config {name} must be positive")
        return config


def transformers_backbone(owner: str, hf_config: Any) -> Any:
    """The ``backbone_config`` of ``hf_config``, or a one-line refusal of the backbones mobius
    cannot build under a universal-segmentation head: timm's or a named checkpoint (weights
    mobius does not map)."""
    hf_backbone = getattr(hf_config, "backbone_config", None)
    kind = getattr(hf_backbone, "model_type", None)
    timm = kind == "timm_backbone" or getattr(hf_config, "use_timm_backbone", False)
    if hf_backbone is None or timm:
        raise ConfigError(
            f"{owner}: the backbone is a timm or named checkpoint (no backbone_config), whose "
            "weights mobius does not map; use a checkpoint with a transformers backbone_config"
        )
    return hf_backbone


def maskformer_backbone(owner: str, hf_config: Any) -> Any:
    """:func:`transformers_backbone`, a ``swin`` one made MaskFormer's own Swin with its four
    stages out, as ``MaskFormerPixelLevelModule`` does (hub checkpoints name ``swin``)."""
    hf_backbone = transformers_backbone(owner, hf_config)
    if hf_backbone.model_type != "swin":
        return hf_backbone
    from transformers import MaskFormerSwinConfig

    stages = len(hf_backbone.depths)
    if stages != len(MASKFORMER_SWIN_STAGES):
        raise ConfigError(
            f"{owner}: transformers puts out all four stages of a Swin backbone under "
            f"MaskFormer; this one has {stages}"
        )
    settings = dict(hf_backbone.to_dict(), model_type="maskformer-swin")
    return MaskFormerSwinConfig.from_dict(settings, out_features=list(MASKFORMER_SWIN_STAGES))


def ones_mask(op, feature_map):
    """``[batch, h, w]`` ones in the map's dtype: sine positions over every pixel (these heads
    pass transformers no padding mask)."""
    one = op.CastLike(op.Constant(value_float=1.0), feature_map)
    batch = op.Shape(feature_map, start=0, end=1)
    return op.Expand(one, op.Concat(batch, op.Shape(feature_map, start=2, end=4), axis=0))


@dataclass
class MaskFormerConfig:
    model_type: str
    backbone_type: str
    backbone: Any  # the backbone family's own config (with out_features)
    decoder: MaskFormerDecoderConfig
    num_channels: int = 3
    num_labels: int = 150
    fpn_feature_size: int = 256
    mask_feature_size: int = 256

    @classmethod
    def from_hf(cls, hf_config: Any) -> MaskFormerConfig:
        """Normalise a transformers ``MaskFormerConfig``; the backbone's through its family."""
        t = hf_config.model_type
        hf_backbone = maskformer_backbone(t, hf_config)
        if getattr(hf_config, "use_auxiliary_loss", False):
            raise ConfigError(
                f"{t}: use_auxiliary_loss makes transformers read the last decoder layer "
                "before its final LayerNorm; mobius builds the inference form only"
            )
        inner = backbone_config(hf_backbone)
        if not hasattr(inner, "feature_channels") or len(inner.out_features) < 1:
            raise ConfigError(f"{t}: mobius's {hf_backbone.model_type} backbone has no maps to use")
        config = cls(
            model_type=t,
            backbone_type=hf_backbone.model_type,
            backbone=inner,
            decoder=MaskFormerDecoderConfig.from_hf(hf_config.decoder_config, t),
            num_channels=int(inner.num_channels),
            num_labels=int(hf_config.num_labels),
            fpn_feature_size=int(hf_config.fpn_feature_size),
            mask_feature_size=int(hf_config.mask_feature_size),
        )
        if config.fpn_feature_size < 1 or config.fpn_feature_size % FPN_GROUPS:
            raise ConfigError(
                f"{t}: fpn_feature_size {config.fpn_feature_size} does not split into "
                f"{FPN_GROUPS} GroupNorm groups"
            )
        if config.num_labels < 1 or config.mask_feature_size < 1:
            raise ConfigError(f"{t}: num_labels and mask_feature_size must be positive")
        return config


def conv_norm(in_channels: int, out_channels: int, kernel: int, relu: bool) -> Sequential:
    """``Sequential(Conv2d (no bias), GroupNorm(32)[, ReLU])``: the FPN's blocks."""
    layers = [
        Conv2d(in_channels, out_channels, kernel, padding=kernel // 2, bias=False),
        GroupNorm(FPN_GROUPS, out_channels),
    ]
    return Sequential([*layers, Activation("relu")] if relu else layers)


def nearest_resize_like(op, x, like):
    """``interpolate(x, size=like.shape[-2:], mode="nearest")``: source index ``floor(i * in / out)``."""
    return op.Resize(
        x,
        None,
        None,
        op.Shape(like, start=2, end=4),
        axes=[2, 3],
        mode="nearest",
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor",
    )


class MaskFormerFPNLayer(nn.Module):
    """The coarser map upsampled onto a projected finer one, then a 3x3 block."""

    def __init__(self, feature_size: int, lateral_width: int) -> None:
        super().__init__()
        self.proj = conv_norm(lateral_width, feature_size, 1, relu=False)
        self.block = conv_norm(feature_size, feature_size, 3, relu=True)

    def forward(self, op, down, left):
        left = self.proj(op, left)
        return self.block(op, op.Add(nearest_resize_like(op, down, left), left))


class MaskFormerFPNModel(nn.Module):
    """A 3x3 stem on the coarsest map, then one layer per finer map, coarse to fine."""

    def __init__(self, channels: list[int], feature_size: int) -> None:
        super().__init__()
        self.stem = conv_norm(channels[-1], feature_size, 3, relu=True)
        self.layers = nn.ModuleList(
            [MaskFormerFPNLayer(feature_size, width) for width in reversed(channels[:-1])]
        )

    def forward(self, op, maps: list):
        x = self.stem(op, maps[-1])
        for layer, left in zip(self.layers, reversed(maps[:-1]), strict=True):
            x = layer(op, x, left)
        return x  # the finest map


class MaskFormerPixelDecoder(nn.Module):
    """The FPN and a 3x3 projection of its finest map: the pixel embeddings."""

    def __init__(self, config: MaskFormerConfig, channels: list[int]) -> None:
        super().__init__()
        self.fpn = MaskFormerFPNModel(channels, config.fpn_feature_size)
        self.mask_projection = Conv2d(
            config.fpn_feature_size, config.mask_feature_size, 3, padding=1
        )

    def forward(self, op, maps: list):
        return self.mask_projection(op, self.fpn(op, maps))


class MaskFormerPixelLevelModule(nn.Module):
    """The backbone (``encoder``) and the pixel decoder: ``(last map, pixel embeddings)``."""

    def __init__(self, config: MaskFormerConfig) -> None:
        super().__init__()
        self.encoder = backbone(config.backbone_type, config.backbone, any_size=True)
        self.decoder = MaskFormerPixelDecoder(config, config.backbone.feature_channels())

    def forward(self, op, pixel_values):
        maps = self.encoder(op, pixel_values)
        return maps[-1], self.decoder(op, maps)


class MaskFormerTransformerModule(nn.Module):
    """DETR's decoder from zero states over the learned queries, attending to the (projected)
    last backbone map with normalised sine positions."""

    def __init__(self, config: MaskFormerConfig, in_channels: int) -> None:
        super().__init__()
        d = config.decoder.d_model
        self.config = config
        self.queries_embedder = Embedding(config.decoder.num_queries, d)
        self.input_projection = Conv2d(in_channels, d, 1) if in_channels != d else None
        self.decoder = DetrDecoder(config.decoder)

    def forward(self, op, image_features):
        d, queries = self.config.decoder.d_model, self.config.decoder.num_queries
        if self.input_projection is not None:
            image_features = self.input_projection(op, image_features)
        positions = sine_positions(op, ones_mask(op, image_features), d // 2, image_features)
        memory = op.Transpose(
            op.Reshape(image_features, op.Constant(value_ints=[0, d, -1])), perm=[0, 2, 1]
        )
        table = op.Unsqueeze(
            self.queries_embedder(op, op.Constant(value_ints=list(range(queries)))), [0]
        )
        batch = op.Shape(image_features, start=0, end=1)
        query_positions = op.Expand(table, op.Concat(batch, op.Constant(value_ints=[1, 1]), axis=0))
        zeros = op.Mul(query_positions, op.CastLike(op.Constant(value_float=0.0), query_positions))
        return self.decoder(op, zeros, memory, None, query_positions, positions)


class MaskFormerModel(nn.Module):
    def __init__(self, config: MaskFormerConfig) -> None:
        super().__init__()
        self.pixel_level_module = MaskFormerPixelLevelModule(config)
        in_channels = config.backbone.feature_channels()[-1]
        self.transformer_module = MaskFormerTransformerModule(config, in_channels)

    def forward(self, op, pixel_values):
        """``(decoder states [batch, queries, d], pixel embeddings [batch, C, h, w])``."""
        last_map, pixel_embeddings = self.pixel_level_module(op, pixel_values)
        return self.transformer_module(op, last_map), pixel_embeddings


def mask_embedder(input_dim: int, hidden_dim: int, output_dim: int) -> Sequential:
    """Three Linear layers with ReLU between them, each its own ``Sequential`` (transformers'
    ``PredictionBlock``s: ``N.0`` the Linear)."""
    return Sequential(
        [
            Sequential([Linear(input_dim, hidden_dim, bias=True), Activation("relu")]),
            Sequential([Linear(hidden_dim, hidden_dim, bias=True), Activation("relu")]),
            Sequential([Linear(hidden_dim, output_dim, bias=True)]),
        ]
    )


def query_masks(op, mask_embeddings, pixel_embeddings):
    """``einsum("bqc,bchw->bqhw")``: each query's embedding dotted with every pixel's."""
    flat = op.Reshape(pixel_embeddings, op.Constant(value_ints=[0, 0, -1]))  # [b, c, h*w]
    masks = op.MatMul(mask_embeddings, flat)  # [b, q, h*w]
    size = op.Concat(op.Shape(masks, start=0, end=2), op.Shape(pixel_embeddings, start=2), axis=0)
    return op.Reshape(masks, size)


def checkpoint_ignored(encoder: nn.Module) -> tuple[str, ...]:
    """What a MaskFormer-family checkpoint holds that no graph reads: the training loss's
    class weights, BatchNorm counters, the backbone's own unread tensors."""
    prefix = "model.pixel_level_module.encoder."
    own = tuple(prefix + pattern for pattern in getattr(encoder, "ignored", ()))
    return ("criterion.*", BATCHNORM_COUNTERS, *own)


class MaskFormerForInstanceSegmentation(UniversalSegmentationModel):
    """``pixel_values`` -> ``class_queries_logits``, ``masks_queries_logits``."""

    config_class = MaskFormerConfig

    def __init__(self, config: MaskFormerConfig) -> None:
        super().__init__()
        self.config = config
        self.model = MaskFormerModel(config)
        d = config.decoder.d_model
        self.class_predictor = Linear(d, self.num_classes(), bias=True)
        self.mask_embedder = mask_embedder(d, d, config.mask_feature_size)

    def num_queries(self) -> int:
        return self.config.decoder.num_queries

    @property
    def ignored(self) -> tuple[str, ...]:
        return checkpoint_ignored(self.model.pixel_level_module.encoder)

    def forward(self, op, pixel_values):
        states, pixel_embeddings = self.model(op, pixel_values)
        return {
            "class_queries_logits": self.class_predictor(op, states),
            "masks_queries_logits": query_masks(
                op, self.mask_embedder(op, states), pixel_embeddings
            ),
        }


MODEL_TYPES = {"maskformer": MaskFormerForInstanceSegmentation}
