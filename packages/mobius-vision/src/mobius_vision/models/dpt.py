"""DPT (``DPTForDepthEstimation``): a ViT, or a registered backbone, under the DPT neck and head.

Two forms, as transformers builds them:

- its own ViT (``dpt.embeddings``, ``dpt.encoder.layer.N``: ViT's layers), whose
  positions are resized bilinearly to the image's patch grid; the neck reads the
  outputs of the layers in ``backbone_out_indices``. transformers reshapes them to a
  square grid, so the images must be square (any multiple of the patch size);
- a ``backbone_config`` (DINOv2): the backbone mobius registers for it
  (:mod:`._backbone`), returning token sequences; any size.

The class token is read out into each stage's patches (``readout_type``: ``ignore``,
``add``, or ``project``: a linear layer over ``[patch, cls]``). The fusion layers always
double their map (unlike Depth Anything's, which upsample to the next map's size); the
head (``head.head.0..5``) doubles once more and ends in a ReLU. DPT-Hybrid (a BiT stem)
is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Conv2d, Linear
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_vision.models._backbone import backbone
from mobius_vision.models._conv import BATCHNORM_COUNTERS, Activation, Sequential
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

    @classmethod
    def from_hf(cls, hf_config: Any) -> DptConfig:
        return cls(**cls.hf_fields(hf_config))

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        head = hf_config.model_type
        if hf_config.is_hybrid:
            raise ConfigError(f"{head}: DPT-Hybrid (a BiT stem under the ViT) is not built yet")
        if list(hf_config.neck_ignore_stages or []):
            raise ConfigError(f"{head}: neck_ignore_stages applies to DPT-Hybrid only")
        readout = hf_config.readout_type
        if readout not in READOUT_TYPES:
            raise ConfigError(f"{head}: readout_type {readout!r} is not one of {READOUT_TYPES}")
        sub = None
        if hf_config.backbone_config is not None:
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
            indices = sorted(set(indices))  # transformers keeps the layers in order, once each
        sizes = tuple(int(s) for s in hf_config.neck_hidden_sizes)
        factors = reassemble_factors(hf_config.reassemble_factors, head)
        if not len(sizes) == len(factors) == len(indices):
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
        )


class DptViTEmbeddings(ViTEmbeddings):
    """``[cls, patches] + positions``, the patch positions resized bilinearly to the image's grid."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__(config)
        self.hidden_size = config.hidden_size
        self.patch_size = config.patch_size
        self.table_side = config.image_size[0] // config.patch_size

    def forward(self, op, pixel_values):
        side, dim = self.table_side, self.hidden_size
        table = self.position_embeddings
        grid = op.Reshape(op.Slice(table, [1], [2**62], [1]), [1, side, side, dim])
        grid = op.Transpose(grid, perm=[0, 3, 1, 2])  # [1, dim, side, side]
        grid = resize_to(
            op, grid, patch_grid(op, pixel_values, self.patch_size), align_corners=False
        )
        grid = op.Reshape(op.Transpose(grid, perm=[0, 2, 3, 1]), [1, -1, dim])
        positions = op.Concat(op.Slice(table, [0], [1], [1]), grid, axis=1)

        patches = self.patch_embeddings(op, pixel_values)
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


class DoublingFusionStage(FeatureFusionStage):
    """DPT's fusion: every layer doubles its map."""

    def next_size(self, op, maps: list, index: int):
        return None


class DptNeck(DptStyleNeck):
    reassemble_class = DptReassembleStage
    fusion_class = DoublingFusionStage


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
        if config.backbone is not None:
            self.backbone = backbone(config.backbone_type, config.backbone)
            self.dpt = None
        else:
            self.backbone = None
            self.dpt = DptViTModel(config.vit, config.backbone_out_indices)
        self.neck = DptNeck(config, batch_norm=config.fusion_batch_norm, bias=config.fusion_bias)
        self.head = DptDepthEstimationHead(config)

    @property
    def ignored(self) -> tuple[str, ...]:
        """The ViT's final norm and pooler, the backbone's unused tensors, batch-norm counters,
        and the coarsest fusion layer's skip unit (it has no skip)."""
        unused = getattr(self.backbone, "unused", ())
        return (
            "dpt.layernorm.*",
            "dpt.pooler.*",
            *(f"backbone.{name}" for name in unused),
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
