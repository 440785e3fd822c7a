"""ZoeDepth (``ZoeDepthForDepthEstimation``): metric depth from a BEiT, DPT's neck and bins heads.

The backbone is whatever mobius registers for ``backbone_config.model_type`` returning token
sequences (BEiT's :class:`~mobius_vision.models.beit.BeitBackbone`, its relative position
tables resampled to each image's patch grid, so any size whose sides are multiples of the
patch runs). The neck is DPT's (readout, reassemble, doubling fusion), and also hands on
its coarsest map (the bottleneck). A relative head (DPT's, keeping its last features)
feeds the metric head (:mod:`._zoedepth_bins`): one bin configuration, or two ("NK") chosen
per batch by a domain classifier, whose ``domain_logits`` are a second output. Keys as
transformers saves them (``backbone.encoder.layer.0...``, ``neck...``, ``relative_head...``,
``metric_head...``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Conv2d
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_vision.models._backbone import backbone
from mobius_vision.models._conv import BATCHNORM_COUNTERS
from mobius_vision.models._dpt_neck import backbone_config, reassemble_factors
from mobius_vision.models._zoedepth_bins import (
    METRIC_STEPS,
    PATCH_TRANSFORMER_LAYERS_RUN,
    BinConfiguration,
    MetricDepthEstimationHead,
    MultipleMetricDepthEstimationHeads,
)
from mobius_vision.models.dinov2 import patch_grid
from mobius_vision.models.dpt import READOUT_TYPES, DptNeck, Upsample2x

BIN_CENTERS_TYPES = ("softplus", "normed")
ATTRACTOR_KINDS = ("mean", "sum")
#: transformers' NK domain classifier is 128 wide, whatever the patch transformer's config says.
NK_CLASSIFIER_WIDTH = 128
#: A bin configuration's name becomes a module name (``metric_head.attractors.<name>``).
BIN_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


@dataclass
class ZoeDepthConfig:
    model_type: str
    backbone_type: str
    backbone: Any
    patch_size: int
    readout_type: str
    readout_act: str
    reassemble_hidden_size: int
    reassemble_factors: tuple[float, ...]
    neck_hidden_sizes: tuple[int, ...]
    fusion_hidden_size: int
    fusion_batch_norm: bool
    fusion_bias: bool
    head_in_index: int
    add_projection: bool
    num_relative_features: int
    bottleneck_features: int
    bin_embedding_dim: int
    num_attractors: tuple[int, ...]
    attractor_kind: str
    min_temp: float
    max_temp: float
    bin_centers_type: str
    bins: tuple[BinConfiguration, ...]
    patch_transformer_hidden_size: int = 0
    patch_transformer_intermediate_size: int = 0
    patch_transformer_num_attention_heads: int = 0
    patch_transformer_layers: int = 0
    num_channels: int = 3

    @classmethod
    def from_hf(cls, hf_config: Any) -> ZoeDepthConfig:
        return cls(**cls.hf_fields(hf_config))

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        head = hf_config.model_type
        sub = backbone_config(getattr(hf_config, "backbone_config", None), head)
        if getattr(sub, "reshape_hidden_states", True):
            raise ConfigError(
                f"{head}: its backbone must return token sequences (reshape_hidden_states false)"
            )
        sizes = tuple(positive(head, "neck_hidden_sizes", s) for s in hf_config.neck_hidden_sizes)
        factors = reassemble_factors(hf_config.reassemble_factors, head)
        if not len(sizes) == len(factors) == len(sub.out_indices) == METRIC_STEPS:
            raise ConfigError(
                f"{head}: neck_hidden_sizes, reassemble_factors and the backbone's outputs must "
                f"be {METRIC_STEPS} each (its metric head reads {METRIC_STEPS} fused maps)"
            )
        if hf_config.readout_type not in READOUT_TYPES:
            raise ConfigError(f"{head}: readout_type {hf_config.readout_type!r} is unknown")
        batch_norm = bool(hf_config.use_batch_norm_in_fusion_residual)
        if batch_norm and hf_config.batch_norm_eps != 1e-5:
            raise ConfigError(f"{head}: batch_norm_eps {hf_config.batch_norm_eps} is not built")
        bias = hf_config.use_bias_in_fusion_residual
        bins = bin_configurations(head, hf_config.bin_configurations)
        attractors = tuple(positive(head, "num_attractors", n) for n in hf_config.num_attractors)
        if len(bins) == 1 and len(attractors) < METRIC_STEPS:
            raise ConfigError(f"{head}: num_attractors needs {METRIC_STEPS} entries")
        choices = (
            ("bin_centers_type", BIN_CENTERS_TYPES),
            ("attractor_kind", ATTRACTOR_KINDS),
        )
        for name, allowed in choices:
            if getattr(hf_config, name) not in allowed:
                raise ConfigError(f"{head}: {name} {getattr(hf_config, name)!r} not in {allowed}")
        min_temp, max_temp = float(hf_config.min_temp), float(hf_config.max_temp)
        if not (0 < min_temp < max_temp and math.isfinite(max_temp)):
            raise ConfigError(f"{head}: min_temp and max_temp must be 0 < min < max")
        fields = dict(
            model_type=head,
            backbone_type=hf_config.backbone_config.model_type,
            backbone=sub,
            patch_size=positive(head, "patch_size", sub.patch_size),
            readout_type=hf_config.readout_type,
            readout_act=hf_config.hidden_act,
            reassemble_hidden_size=positive(head, "hidden_size", sub.hidden_size),
            reassemble_factors=factors,
            neck_hidden_sizes=sizes,
            fusion_hidden_size=positive(head, "fusion_hidden_size", hf_config.fusion_hidden_size),
            fusion_batch_norm=batch_norm,
            fusion_bias=(not batch_norm) if bias is None else bool(bias),
            head_in_index=head_index(head, hf_config.head_in_index),
            add_projection=bool(hf_config.add_projection),
            num_relative_features=positive(
                head, "num_relative_features", hf_config.num_relative_features
            ),
            bottleneck_features=positive(
                head, "bottleneck_features", hf_config.bottleneck_features
            ),
            bin_embedding_dim=positive(head, "bin_embedding_dim", hf_config.bin_embedding_dim),
            num_attractors=attractors,
            attractor_kind=hf_config.attractor_kind,
            min_temp=min_temp,
            max_temp=max_temp,
            bin_centers_type=hf_config.bin_centers_type,
            bins=bins,
            num_channels=sub.num_channels,
        )
        if len(bins) > 1:
            fields.update(patch_transformer_fields(hf_config))
        return fields


def positive(head: str, name: str, value: Any) -> int:
    """``value`` as a positive int, or a one-line refusal naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{head}: {name} {value!r} is not a positive integer")
    return value


def head_index(head: str, value: Any) -> int:
    """``head_in_index`` checked: an index into the fused maps (negative from the end)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not -METRIC_STEPS <= value < METRIC_STEPS
    ):
        raise ConfigError(f"{head}: head_in_index {value!r} is not an index of the fused maps")
    return value


def bin_configurations(head: str, raw: Any) -> tuple[BinConfiguration, ...]:
    """The checked ``bin_configurations``: one, or two named ones (the NK heads' domains)."""
    if not isinstance(raw, (list, tuple)) or len(raw) not in (1, 2):
        raise ConfigError(
            f"{head}: bin_configurations must hold 1 or 2 entries (transformers' domain "
            "classifier has 2 outputs)"
        )
    bins = []
    for entry in raw:
        if not isinstance(entry, dict):
            raise ConfigError(f"{head}: bin configuration {entry!r} is not a mapping")
        name = entry.get("name")
        if len(raw) > 1 and not (isinstance(name, str) and BIN_NAME.fullmatch(name)):
            raise ConfigError(f"{head}: bin configuration name {name!r} is not a plain word")
        low, high = entry.get("min_depth"), entry.get("max_depth")
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high))
        if not numbers or not (math.isfinite(low) and math.isfinite(high) and 0 <= low < high):
            raise ConfigError(f"{head}: bin depths {low!r}..{high!r} are not 0 <= min < max")
        n_bins = positive(head, "n_bins", entry.get("n_bins"))
        bins.append(BinConfiguration(name, n_bins, float(low), float(high)))
    if len({b.name for b in bins}) != len(bins):
        raise ConfigError(f"{head}: bin configuration names repeat")
    return tuple(bins)


def patch_transformer_fields(hf_config: Any) -> dict[str, int]:
    """The NK domain classifier's sizes, checked against what transformers hard-codes."""
    head = hf_config.model_type
    fields = {
        name: positive(head, name, getattr(hf_config, name))
        for name in (
            "patch_transformer_hidden_size",
            "patch_transformer_intermediate_size",
            "patch_transformer_num_attention_heads",
        )
    }
    layers = positive(head, "num_patch_transformer_layers", hf_config.num_patch_transformer_layers)
    if fields["patch_transformer_hidden_size"] != NK_CLASSIFIER_WIDTH:
        raise ConfigError(
            f"{head}: patch_transformer_hidden_size must be {NK_CLASSIFIER_WIDTH} "
            "(transformers' domain classifier takes that width)"
        )
    if layers < PATCH_TRANSFORMER_LAYERS_RUN:
        raise ConfigError(
            f"{head}: num_patch_transformer_layers {layers} is under the "
            f"{PATCH_TRANSFORMER_LAYERS_RUN} transformers runs"
        )
    if fields["patch_transformer_hidden_size"] % fields["patch_transformer_num_attention_heads"]:
        raise ConfigError(f"{head}: patch_transformer heads do not divide its width")
    return dict(fields, patch_transformer_layers=layers)


class ZoeDepthNeck(DptNeck):
    """DPT's neck, returning ``(fused maps coarsest first, the coarsest projected map)``."""

    def forward(self, op, hidden_states: list, grid):
        maps = self.reassemble_stage(op, hidden_states, grid)
        features = [conv(op, m) for conv, m in zip(self.convs, maps, strict=True)]
        return self.fusion_stage(op, features), features[-1]


class ZoeDepthRelativeDepthEstimationHead(nn.Module):
    """DPT's depth head as named convs: ``(relative depth, its features before conv3)``.

    The NK heads never read the relative depth: there ``conv3`` is left out (None)."""

    def __init__(self, config: ZoeDepthConfig) -> None:
        super().__init__()
        features = config.fusion_hidden_size
        self.projection = Conv2d(256, 256, 3, padding=1) if config.add_projection else None
        self.conv1 = Conv2d(features, features // 2, 3, padding=1)
        self.upsample = Upsample2x()
        self.conv2 = Conv2d(features // 2, config.num_relative_features, 3, padding=1)
        single = len(config.bins) == 1
        self.conv3 = Conv2d(config.num_relative_features, 1, 1) if single else None
        self.head_in_index = config.head_in_index

    def forward(self, op, fused: list):
        x = fused[self.head_in_index]
        if self.projection is not None:
            x = op.Relu(self.projection(op, x))
        features = op.Relu(self.conv2(op, self.upsample(op, self.conv1(op, x))))
        if self.conv3 is None:
            return None, features
        depth = op.Relu(self.conv3(op, features))
        return op.Squeeze(depth, op.Constant(value_ints=[1])), features


class ZoeDepthForDepthEstimation(Model):
    """``pixel_values`` [batch, 3, height, width] -> ``predicted_depth`` [batch, 8 * height /
    patch... ] (and ``domain_logits`` [batch, 2] with two bin configurations)."""

    config_class = ZoeDepthConfig
    task = "depth-estimation"
    fixed_image_size = None  # the position tables are resampled: any multiple of the patch

    def __init__(self, config: ZoeDepthConfig) -> None:
        super().__init__()
        self.config = config
        self.backbone = backbone(config.backbone_type, config.backbone)
        self.neck = ZoeDepthNeck(
            config, batch_norm=config.fusion_batch_norm, bias=config.fusion_bias
        )
        self.relative_head = ZoeDepthRelativeDepthEstimationHead(config)
        multi = len(config.bins) > 1
        head = MultipleMetricDepthEstimationHeads if multi else MetricDepthEstimationHead
        self.metric_head = head(config)

    @property
    def ignored(self) -> tuple[str, ...]:
        """The backbone's unread tensors, batch-norm counters, the coarsest fusion layer's skip
        unit (it has no skip), and with NK heads the relative depth's conv (they never read
        it) and the patch-transformer layers transformers never runs."""
        unused = getattr(self.backbone, "unused", ())
        unrun = range(PATCH_TRANSFORMER_LAYERS_RUN, self.config.patch_transformer_layers)
        multi = len(self.config.bins) > 1
        return (
            *(("relative_head.conv3.*",) if multi else ()),
            *(f"backbone.{name}" for name in unused),
            BATCHNORM_COUNTERS,
            "neck.fusion_stage.layers.0.residual_layer1.*",
            *(f"metric_head.patch_transformer.transformer_encoder.{i}.*" for i in unrun),
        )

    def output_shapes(self) -> dict[str, list]:
        shapes = {"predicted_depth": ["batch", "depth_height", "depth_width"]}
        if len(self.config.bins) > 1:
            shapes["domain_logits"] = ["batch", len(self.config.bins)]
        return shapes

    def forward(self, op, pixel_values):
        grid = patch_grid(op, pixel_values, self.config.patch_size)
        fused, bottleneck = self.neck(op, self.backbone(op, pixel_values), grid)
        relative_depth, features = self.relative_head(op, fused)
        depth, domain_logits = self.metric_head(op, features, bottleneck, fused, relative_depth)
        outputs = {"predicted_depth": depth}
        if domain_logits is not None:
            outputs["domain_logits"] = domain_logits
        return outputs


MODEL_TYPES = {"zoedepth": ZoeDepthForDepthEstimation}
