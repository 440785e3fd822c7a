"""DPT (``DPTForDepthEstimation``): a ViT, or a registered backbone, under the DPT neck and head.

Three forms, as transformers builds them:

- its own ViT (``dpt.embeddings``, ``dpt.encoder.layer.N``: ViT's layers), whose
  positions are resized bilinearly to the image's patch grid; the neck reads the
  outputs of the layers in ``backbone_out_indices``. transformers reshapes them to a
  square grid, so the images must be square (any multiple of the patch size);
- a ``backbone_config`` (DINOv2, BEiT): the backbone mobius registers for it
  (:mod:`._backbone`), returning token sequences; any size;
- DPT-Hybrid (``is_hybrid``): a BiT stem (``dpt.embeddings.backbone.bit...``) whose last
  map, projected, is the ViT's tokens; its first two maps go to the neck's first two
  stages as they are (``neck_ignore_stages``), the read layers to the others. transformers
  takes the position table's image size only, so the graph's size is fixed.

The class token is read out into each stage's patches (``readout_type``: ``ignore``,
``add``, or ``project``: a linear layer over ``[patch, cls]``). The fusion layers always
double their map (unlike Depth Anything's, which upsample to the next map's size); the
head (``head.head.0..5``) doubles once more and ends in a ReLU.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Conv2d, Linear
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_vision.models._backbone import backbone
from mobius_vision.models._conv import BATCHNORM_COUNTERS, Activation, Identity, Sequential
from mobius_vision.models._dpt_neck import (
    DptStyleNeck,
    FeatureFusionStage,
    ReassembleStage,
    backbone_config,
    drop_class_token,
    patches_to_map,
    reassemble_factors,
    resize_to,
)
from mobius_vision.models.dinov2 import patch_grid
from mobius_vision.models.vit import ViTConfig, ViTEmbeddings, ViTEncoder

READOUT_TYPES = ("ignore", "add", "project")


@dataclass
class DptConfig:
    model_type: str
    vit: ViTConfig | None  # DPT's own ViT, or None under a backbone_config
    backbone_type: str | None
    backbone: Any
    patch_size: int
    backbone_out_indices: tuple[int, ...]
    readout_type: str
    readout_act: str
    reassemble_hidden_size: int
    reassemble_factors: tuple[float, ...]
    neck_hidden_sizes: tuple[int, ...]
    fusion_hidden_size: int
    head_in_index: int
    fusion_batch_norm: bool
    fusion_bias: bool
    add_projection: bool
    num_channels: int = 3
    #: DPT-Hybrid's BiT stem (its backbone config), None otherwise.
    stem: Any = None
    #: DPT-Hybrid's neck stages that take the stem's maps as they are.
    neck_ignore_stages: tuple[int, ...] = ()

    @classmethod
    def from_hf(cls, hf_config: Any) -> DptConfig:
        return cls(**cls.hf_fields(hf_config))

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        head = hf_config.model_type
        hybrid = bool(hf_config.is_hybrid)
        if list(hf_config.neck_ignore_stages or []) and not hybrid:
            raise ConfigError(f"{head}: neck_ignore_stages applies to DPT-Hybrid only")
        readout = hf_config.readout_type
        if readout not in READOUT_TYPES:
            raise ConfigError(f"{head}: readout_type {readout!r} is not one of {READOUT_TYPES}")
        sub = None
        if hf_config.backbone_config is not None and not hybrid:
            sub = backbone_config(hf_config.backbone_config, head)
            if getattr(sub, "reshape_hidden_states", True):
                raise ConfigError(f"{head}: mobius builds DPT over token backbones only (DINOv2)")
            vit, hidden, patch = None, sub.hidden_size, sub.patch_size
            indices = sub.out_indices
        else:
            vit = ViTConfig.from_hf(hf_config)
            hidden, patch = vit.hidden_size, vit.patch_size
            indices = list(hf_config.backbone_out_indices)
            if not all(isinstance(i, int) and 0 <= i < vit.num_hidden_layers for i in indices):
                raise ConfigError(f"{head}: backbone_out_indices {indices} are not layer indices")
            if hybrid:  # the stem's first two maps come first, then layers past the first two
                indices = indices[len(HYBRID_STEM_STAGES) :]
            indices = sorted(set(indices))  # transformers keeps the layers in order, once each
        sizes = tuple(int(s) for s in hf_config.neck_hidden_sizes)
        factors = reassemble_factors(hf_config.reassemble_factors, head)
        stem = hybrid_stem(hf_config, vit, sizes) if hybrid else None
        inputs = len(indices) + (len(HYBRID_STEM_STAGES) if hybrid else 0)  # the neck's inputs
        if not len(sizes) == len(factors) == inputs:
            raise ConfigError(
                f"{head}: neck_hidden_sizes, reassemble_factors and the backbone's out indices "
                "must be as many"
            )
        batch_norm = bool(hf_config.use_batch_norm_in_fusion_residual)
        bias = hf_config.use_bias_in_fusion_residual
        return dict(
            model_type=head,
            vit=vit,
            backbone_type=None if sub is None else hf_config.backbone_config.model_type,
            backbone=sub,
            patch_size=int(patch),
            backbone_out_indices=tuple(indices),
            readout_type=readout,
            readout_act=hf_config.hidden_act,
            reassemble_hidden_size=int(hidden),
            reassemble_factors=factors,
            neck_hidden_sizes=sizes,
            fusion_hidden_size=int(hf_config.fusion_hidden_size),
            head_in_index=int(hf_config.head_in_index),
            fusion_batch_norm=batch_norm,
            fusion_bias=(not batch_norm) if bias is None else bool(bias),
            add_projection=bool(hf_config.add_projection),
            num_channels=int(getattr(hf_config, "num_channels", 3) or 3),
            stem=stem,
            neck_ignore_stages=HYBRID_STEM_STAGES if hybrid else (),
        )


#: The neck stages DPT-Hybrid fills with its stem's first two maps (transformers fixes them).
HYBRID_STEM_STAGES = (0, 1)


def hybrid_stem(hf_config: Any, vit: ViTConfig, neck_sizes: tuple[int, ...]) -> Any:
    """DPT-Hybrid's BiT backbone config, at the ViT's image size, checked against what
    transformers' hybrid embeddings assume of it."""
    head = hf_config.model_type
    if tuple(hf_config.neck_ignore_stages or ()) != HYBRID_STEM_STAGES:
        raise ConfigError(f"{head}: DPT-Hybrid's neck_ignore_stages must be [0, 1]")
    if hf_config.readout_type != "project":
        raise ConfigError(f"{head}: DPT-Hybrid reads its class token out by projection only")
    if hf_config.backbone_config is None or hf_config.backbone_config.model_type != "bit":
        raise ConfigError(f"{head}: DPT-Hybrid's stem must be a BiT backbone_config")
    stem = dataclasses.replace(
        backbone_config(hf_config.backbone_config, head), image_size=vit.image_size
    )
    channels = stem.feature_channels()
    if len(channels) != 3:
        raise ConfigError(f"{head}: DPT-Hybrid's BiT must return 3 maps (out_features)")
    if stem.reduction() != vit.patch_size or any(s % vit.patch_size for s in vit.image_size):
        raise ConfigError(
            f"{head}: DPT-Hybrid's BiT reduces the image {stem.reduction()}x; its patch_size "
            f"{vit.patch_size} must equal that and divide image_size {vit.image_size}"
        )
    shape = list(hf_config.backbone_featmap_shape or ())
    if len(shape) != 4 or shape[1] != channels[-1]:
        raise ConfigError(
            f"{head}: backbone_featmap_shape {shape} does not give its BiT's last width "
            f"{channels[-1]}"
        )
    if tuple(neck_sizes[: len(HYBRID_STEM_STAGES)]) != tuple(channels[: len(HYBRID_STEM_STAGES)]):
        raise ConfigError(
            f"{head}: neck_hidden_sizes {list(neck_sizes)} must start with the BiT stage "
            f"widths {channels[:2]}"
        )
    return stem


class DptViTEmbeddings(ViTEmbeddings):
    """``[cls, patches] + positions``, the patch positions resized bilinearly to the image's grid."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__(config)
        self.hidden_size = config.hidden_size
        self.patch_size = config.patch_size
        self.table_side = config.image_size[0] // config.patch_size

    def forward(self, op, pixel_values):
        return self.with_positions(op, self.patch_embeddings(op, pixel_values), pixel_values)

    def with_positions(self, op, patches, pixel_values):
        """``[cls, patches] + positions`` for ``patches`` ``[batch, patches, hidden]``."""
        side, dim = self.table_side, self.hidden_size
        table = self.position_embeddings
        grid = op.Reshape(op.Slice(table, [1], [2**62], [1]), [1, side, side, dim])
        grid = op.Transpose(grid, perm=[0, 3, 1, 2])  # [1, dim, side, side]
        grid = resize_to(
            op, grid, patch_grid(op, pixel_values, self.patch_size), align_corners=False
        )
        grid = op.Reshape(op.Transpose(grid, perm=[0, 2, 3, 1]), [1, -1, dim])
        positions = op.Concat(op.Slice(table, [0], [1], [1]), grid, axis=1)
        batch = op.Shape(pixel_values, start=0, end=1)
        cls = op.Expand(self.cls_token, op.Concat(batch, op.Constant(value_ints=[1, 1]), axis=0))
        return op.Add(op.Concat(cls, patches, axis=1), positions)


class DptViTEncoder(ViTEncoder):
    """ViT's layers, returning each layer's output."""

    def forward(self, op, x) -> list:
        outputs = []
        for layer in self.layer:
            x = layer(op, x)
            outputs.append(x)
        return outputs


class DptViTModel(nn.Module):
    """DPT's ViT: the layer outputs the neck reads (its final ``layernorm`` is unused)."""

    def __init__(self, config: ViTConfig, out_indices: tuple[int, ...]) -> None:
        super().__init__()
        self.embeddings = DptViTEmbeddings(config)
        self.encoder = DptViTEncoder(config)
        self.out_indices = out_indices

    def forward(self, op, pixel_values) -> list:
        outputs = self.encoder(op, self.embeddings(op, pixel_values))
        return [outputs[i] for i in self.out_indices]


class DptHybridEmbeddings(DptViTEmbeddings):
    """DPT-Hybrid's: the BiT stem's last map projected (1x1) to tokens, then ``[cls, tokens] +
    positions``; also returns the stem's first two maps, which go to the neck as they are."""

    def __init__(self, config: ViTConfig, stem: Any) -> None:
        nn.Module.__init__(self)  # no patch embeddings: the stem makes the tokens
        self.cls_token = nn.Parameter([1, 1, config.hidden_size])
        self.position_embeddings = nn.Parameter([1, config.num_patches + 1, config.hidden_size])
        self.backbone = backbone("bit", stem)
        self.projection = Conv2d(stem.feature_channels()[-1], config.hidden_size, 1)
        self.hidden_size = config.hidden_size
        self.patch_size = config.patch_size
        self.table_side = config.image_size[0] // config.patch_size

    def forward(self, op, pixel_values):
        maps = self.backbone(op, pixel_values)
        tokens = self.projection(op, maps[-1])
        tokens = op.Reshape(tokens, op.Concat(op.Shape(tokens, start=0, end=2), [-1], axis=0))
        tokens = op.Transpose(tokens, perm=[0, 2, 1])  # [batch, patches, hidden]
        return self.with_positions(op, tokens, pixel_values), maps[: len(HYBRID_STEM_STAGES)]


class DptHybridViTModel(DptViTModel):
    """DPT-Hybrid's ViT: the stem's first two maps, then the read layers' outputs."""

    def __init__(self, config: DptConfig) -> None:
        nn.Module.__init__(self)
        self.embeddings = DptHybridEmbeddings(config.vit, config.stem)
        self.encoder = DptViTEncoder(config.vit)
        self.out_indices = config.backbone_out_indices

    def forward(self, op, pixel_values) -> list:
        tokens, maps = self.embeddings(op, pixel_values)
        outputs = self.encoder(op, tokens)
        return [*maps, *(outputs[i] for i in self.out_indices)]


class DptReassembleStage(ReassembleStage):
    """Reassembling with the class token read out into the patches first."""

    def __init__(self, config: DptConfig) -> None:
        super().__init__(config)
        self.readout_type = config.readout_type
        hidden = config.reassemble_hidden_size
        self.readout_projects = None
        if config.readout_type == "project":
            self.readout_projects = nn.ModuleList(
                [
                    Sequential(
                        [Linear(2 * hidden, hidden, bias=True), Activation(config.readout_act)]
                    )
                    for _ in config.neck_hidden_sizes
                ]
            )

    def to_map(self, op, index: int, tokens, grid):
        cls = op.Slice(tokens, [0], [1], [1])  # [batch, 1, hidden]
        patches = drop_class_token(op, tokens)
        if self.readout_type == "project":
            readout = op.Expand(cls, op.Shape(patches))
            patches = self.readout_projects[index](op, op.Concat(patches, readout, axis=-1))
        elif self.readout_type == "add":
            patches = op.Add(patches, cls)
        return patches_to_map(op, patches, grid)


class DptHybridReassembleStage(DptReassembleStage):
    """DPT-Hybrid's: the stages in ``neck_ignore_stages`` take the stem's maps as they are
    (their layers and readouts are identities, without weights)."""

    def __init__(self, config: DptConfig) -> None:
        super().__init__(config)
        self.ignored = config.neck_ignore_stages
        self.layers = nn.ModuleList(
            [Identity() if i in self.ignored else m for i, m in enumerate(self.layers)]
        )
        self.readout_projects = nn.ModuleList(
            [Identity() if i in self.ignored else m for i, m in enumerate(self.readout_projects)]
        )

    def forward(self, op, hidden_states: list, grid) -> list:
        return [
            x if index in self.ignored else layer(op, self.to_map(op, index, x, grid))
            for index, (layer, x) in enumerate(zip(self.layers, hidden_states, strict=True))
        ]


class DoublingFusionStage(FeatureFusionStage):
    """DPT's fusion: every layer doubles its map."""

    def next_size(self, op, maps: list, index: int):
        return None


class DptNeck(DptStyleNeck):
    reassemble_class = DptReassembleStage
    fusion_class = DoublingFusionStage


class DptHybridNeck(DptNeck):
    reassemble_class = DptHybridReassembleStage


class Upsample2x(nn.Module):
    """``nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)``."""

    def forward(self, op, x):
        size = op.Mul(op.Shape(x, start=2, end=4), op.Constant(value_ints=[2, 2]))
        return resize_to(op, x, size, align_corners=True)


class DptDepthEstimationHead(nn.Module):
    """[``projection`` 256 -> 256, ReLU] -> conv -> upsample x2 -> conv to 32, ReLU -> conv to 1, ReLU."""

    def __init__(self, config: DptConfig) -> None:
        super().__init__()
        features = config.fusion_hidden_size
        self.projection = Conv2d(256, 256, 3, padding=1) if config.add_projection else None
        self.head = Sequential(
            [
                Conv2d(features, features // 2, 3, padding=1),
                Upsample2x(),
                Conv2d(features // 2, 32, 3, padding=1),
                Activation("relu"),
                Conv2d(32, 1, 1),
                Activation("relu"),
            ]
        )
        self.head_in_index = config.head_in_index

    def forward(self, op, fused: list):
        x = fused[self.head_in_index]
        if self.projection is not None:
            x = op.Relu(self.projection(op, x))
        return op.Squeeze(self.head(op, x), op.Constant(value_ints=[1]))


class DptForDepthEstimation(Model):
    """``pixel_values`` [batch, 3, height, width] -> ``predicted_depth`` [batch, height, width]."""

    config_class = DptConfig
    task = "depth-estimation"
    fixed_image_size = None  # positions are interpolated: any multiple of the patch size

    def __init__(self, config: DptConfig) -> None:
        super().__init__()
        self.config = config
        hybrid = config.stem is not None
        if config.backbone is not None:
            self.backbone = backbone(config.backbone_type, config.backbone)
            self.dpt = None
        elif hybrid:  # transformers' hybrid embeddings take their table's size only
            self.backbone = None
            self.dpt = DptHybridViTModel(config)
            self.fixed_image_size = config.vit.image_size
        else:
            self.backbone = None
            self.dpt = DptViTModel(config.vit, config.backbone_out_indices)
        neck = DptHybridNeck if hybrid else DptNeck
        self.neck = neck(config, batch_norm=config.fusion_batch_norm, bias=config.fusion_bias)
        self.head = DptDepthEstimationHead(config)

    @property
    def ignored(self) -> tuple[str, ...]:
        """The ViT's final norm and pooler, the backbone's unused tensors, batch-norm counters,
        and the coarsest fusion layer's skip unit (it has no skip)."""
        unused = getattr(self.backbone, "unused", ())
        if self.config.stem is not None:
            stem = self.dpt.embeddings.backbone
            unused = (f"dpt.embeddings.backbone.{name}" for name in stem.unused)
        else:
            unused = (f"backbone.{name}" for name in unused)
        return (
            "dpt.layernorm.*",
            "dpt.pooler.*",
            *unused,
            BATCHNORM_COUNTERS,
            "neck.fusion_stage.layers.0.residual_layer1.*",
        )

    def output_shapes(self) -> dict[str, list]:
        return {"predicted_depth": ["batch", "depth_height", "depth_width"]}

    def forward(self, op, pixel_values):
        encoder = self.backbone if self.backbone is not None else self.dpt
        grid = patch_grid(op, pixel_values, self.config.patch_size)
        fused = self.neck(op, encoder(op, pixel_values), grid)
        return {"predicted_depth": self.head(op, fused)}


MODEL_TYPES = {"dpt": DptForDepthEstimation}
