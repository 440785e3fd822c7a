"""YOLOS: a ViT whose sequence ends with learned detection tokens, read by class and box heads.

The image may be any size: the patch position table (made for the config's
``image_size``) is resized bicubically to the image's patch grid, as transformers'
``InterpolateInitialPositionEmbeddings`` does, and so are the per-layer tables of
``use_mid_position_embeddings`` (added after every layer but the last). The class
token and detection tokens keep their positions. The ViT layers are mobius's ViT's
(the checkpoint names are the same: ``vit.encoder.layer.0.attention.attention.query``);
the heads are DETR's MLPs on the last ``num_detection_tokens`` states: softmax classes
with a last "no object" class, sigmoid boxes. No ``pixel_mask``: the model has none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from onnxscript import nn

from mobius.components import LayerNorm
from mobius.errors import ConfigError
from mobius_vision.models._common import torch_bicubic_resize
from mobius_vision.models._detr import DetrMLPPredictionHead
from mobius_vision.models.vit import ViTConfig, ViTLayer, ViTPatchEmbeddings
from mobius_vision.tasks.object_detection import DetectionModel


@dataclass
class YolosConfig(ViTConfig):
    num_detection_tokens: int = 100
    use_mid_position_embeddings: bool = True

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        tokens = hf_config.num_detection_tokens
        if not isinstance(tokens, int) or tokens < 1:
            raise ConfigError(f"yolos num_detection_tokens must be a positive int, not {tokens!r}")
        return dict(
            fields,
            num_detection_tokens=tokens,
            use_mid_position_embeddings=bool(hf_config.use_mid_position_embeddings),
        )

    @property
    def table_grid(self) -> tuple[int, int]:
        """The patch grid the position tables were made for."""
        height, width = self.image_size
        return height // self.patch_size, width // self.patch_size


def resize_positions(op, table, config: YolosConfig, pixel_values):
    """Position tables ``[n, 1 + patches + detection, hidden]`` with the patch part resized
    (bicubic, ``align_corners=False``) to the patch grid of ``pixel_values``."""
    rows, columns = config.table_grid
    hidden = config.hidden_size
    detection = config.num_detection_tokens
    cls_position = op.Slice(table, [0], [1], [1])
    patches = op.Slice(table, [1], [-detection], [1])
    detection_positions = op.Slice(table, [-detection], [2**62], [1])
    grid = op.Reshape(patches, op.Constant(value_ints=[-1, rows, columns, hidden]))
    grid = op.Transpose(grid, perm=[0, 3, 1, 2])  # [n, hidden, rows, columns]
    image_grid = op.Div(
        op.Shape(pixel_values, start=2, end=4), op.Constant(value_ints=[config.patch_size])
    )
    sizes = op.Concat(op.Shape(grid, start=0, end=2), image_grid, axis=0)
    grid = torch_bicubic_resize(op, grid, sizes)
    grid = op.Transpose(grid, perm=[0, 2, 3, 1])
    grid = op.Reshape(grid, op.Constant(value_ints=[0, -1, hidden]))
    return op.Concat(cls_position, grid, detection_positions, axis=1)


class YolosEmbeddings(nn.Module):
    """``[cls, patches, detection tokens]`` plus their (resized) positions."""

    def __init__(self, config: YolosConfig) -> None:
        super().__init__()
        self.config = config
        d = config.hidden_size
        self.cls_token = nn.Parameter([1, 1, d])
        self.detection_tokens = nn.Parameter([1, config.num_detection_tokens, d])
        self.patch_embeddings = ViTPatchEmbeddings(config)
        tokens = 1 + config.num_patches + config.num_detection_tokens
        self.position_embeddings = nn.Parameter([1, tokens, d])

    def forward(self, op, pixel_values):
        patches = self.patch_embeddings(op, pixel_values)
        batch = op.Shape(pixel_values, start=0, end=1)
        shape = op.Concat(batch, op.Constant(value_ints=[1, 1]), axis=0)
        cls = op.Expand(self.cls_token, shape)
        detection = op.Expand(self.detection_tokens, shape)
        x = op.Concat(cls, patches, detection, axis=1)
        return op.Add(x, resize_positions(op, self.position_embeddings, self.config, pixel_values))


class YolosEncoder(nn.Module):
    """ViT layers; with mid positions, a resized table added after each layer but the last."""

    def __init__(self, config: YolosConfig) -> None:
        super().__init__()
        self.config = config
        self.layer = nn.ModuleList([ViTLayer(config) for _ in range(config.num_hidden_layers)])
        if config.use_mid_position_embeddings:
            tokens = 1 + config.num_patches + config.num_detection_tokens
            layers = config.num_hidden_layers - 1
            self.mid_position_embeddings = nn.Parameter([layers, 1, tokens, config.hidden_size])
        else:
            self.mid_position_embeddings = None

    def forward(self, op, x, pixel_values):
        mid = None
        if self.mid_position_embeddings is not None:
            table = op.Squeeze(self.mid_position_embeddings, [1])  # [layers - 1, tokens, hidden]
            mid = resize_positions(op, table, self.config, pixel_values)
        last = len(self.layer) - 1
        for index, layer in enumerate(self.layer):
            x = layer(op, x)
            if mid is not None and index < last:
                x = op.Add(x, op.Gather(mid, op.Constant(value_int=index), axis=0))
        return x


class YolosModel(nn.Module):
    def __init__(self, config: YolosConfig) -> None:
        super().__init__()
        self.embeddings = YolosEmbeddings(config)
        self.encoder = YolosEncoder(config)
        self.layernorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, pixel_values):
        x = self.encoder(op, self.embeddings(op, pixel_values), pixel_values)
        return self.layernorm(op, x)


class YolosForObjectDetection(DetectionModel):
    """The detection tokens' states through the class and box MLPs."""

    config_class = YolosConfig
    takes_pixel_mask: ClassVar[bool] = False

    def __init__(self, config: YolosConfig) -> None:
        super().__init__()
        config.require_no_head()
        self.config = config
        self.vit = YolosModel(config)
        d = config.hidden_size
        self.class_labels_classifier = DetrMLPPredictionHead(d, d, config.num_labels + 1, 3)
        self.bbox_predictor = DetrMLPPredictionHead(d, d, 4, 3)

    def output_shapes(self) -> dict[str, list]:
        tokens = self.config.num_detection_tokens
        return {
            "logits": ["batch", tokens, self.config.num_labels + 1],
            "pred_boxes": ["batch", tokens, 4],
        }

    def forward(self, op, pixel_values):
        hidden = self.vit(op, pixel_values)
        detection = op.Slice(hidden, [-self.config.num_detection_tokens], [2**62], [1])
        logits = self.class_labels_classifier(op, detection)
        boxes = op.Sigmoid(self.bbox_predictor(op, detection))
        return {"logits": logits, "pred_boxes": boxes}


MODEL_TYPES = {"yolos": YolosForObjectDetection}
