"""PaddleOCR-VL: a SigLIP-style rotary tower with resampled learned positions, a patch-merging
projector, and an ERNIE 4.5 decoder with M-RoPE.

The vision inputs are what ``PaddleOCRVLImageProcessor`` returns: ``pixel_values
[patches, channels, patch_size, patch_size]`` (each image's patches in row order) and
``image_grid_thw [images, 3]``. The tower (``model.visual.vision_model``) is VideoLLaMA3's
(:mod:`.video_llama_3`: the patch Conv2d as a matmul, encoder layers with 2-D rotary and
attention within each image, ``post_layernorm``) plus SigLIP's learned position table,
resampled bilinearly with half-pixel centres to each image's patch grid (transformers'
``get_vision_interpolation_indices_and_weights``, ``align_corners=False``). The projector
(``model.projector``) LayerNorms each patch, concatenates each ``merge x merge`` block
(row-major within the block), then Linear, GELU, Linear. The decoder is mobius-text's
``paddleocr_vl_text`` over ``position_ids [3, batch, sequence]`` (the model's
``get_rope_index``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, LayerNorm, Linear, get_activation
from mobius.errors import ConfigError
from mobius_text.models.paddleocr_vl_text import PaddleOCRTextConfig, PaddleOCRTextForCausalLM
from mobius_vision.config import VisionLanguageConfig
from mobius_vision.models._vl import VisionLanguageModel
from mobius_vision.models.qwen2_vl import _column, patch_images, patch_layout, same_group
from mobius_vision.models.video_llama_3 import (
    PatchEmbedding,
    VideoLlama3VisionConfig,
    VideoLlama3VisionTower,
)

FLOAT, INT64 = ir.DataType.FLOAT, ir.DataType.INT64


@dataclass
class PaddleOCRVisionConfig(VideoLlama3VisionConfig):
    image_size: int = 384
    spatial_merge_size: int = 2

    @classmethod
    def from_hf(cls, hf: Any) -> PaddleOCRVisionConfig:
        fields = vars(VideoLlama3VisionConfig.from_hf(hf))
        image_size, merge = hf.image_size, hf.spatial_merge_size
        if not isinstance(image_size, int) or image_size < hf.patch_size:
            raise ConfigError(
                f"{hf.model_type}: image_size {image_size!r} is not one int of a patch or more"
            )
        if not isinstance(merge, int) or merge < 1:
            raise ConfigError(
                f"{hf.model_type}: spatial_merge_size {merge!r} is not a positive int"
            )
        return cls(**fields, image_size=image_size, spatial_merge_size=merge)

    @property
    def num_positions(self) -> int:
        return (self.image_size // self.patch_size) ** 2


def half_pixel_taps(op, index, size, side: int):
    """Per patch the two taps ``[patches, 2]`` into a ``side``-long table and their weights,
    resampling an axis of ``size`` patches with half-pixel centres (``align_corners=False``)."""
    src = op.Sub(
        op.Div(
            op.Mul(
                op.Add(op.Cast(index, to=FLOAT), op.Constant(value_float=0.5)),
                op.Constant(value_float=float(side)),
            ),
            op.Cast(size, to=FLOAT),
        ),
        op.Constant(value_float=0.5),
    )
    floor = op.Floor(src)
    offsets = op.Constant(value_floats=[0.0, 1.0])
    taps = op.Add(op.Unsqueeze(op.Cast(floor, to=INT64), [1]), op.Cast(offsets, to=INT64))
    taps = op.Clip(taps, op.Constant(value_int=0), op.Constant(value_int=side - 1))
    distance = op.Abs(op.Sub(op.Unsqueeze(op.Sub(src, floor), [1]), offsets))
    weights = op.Max(op.Sub(op.Constant(value_float=1.0), distance), op.Constant(value_float=0.0))
    return taps, weights  # [patches, 2] each


class PaddleOCRVisionEmbeddings(PatchEmbedding):
    """The patch matmul plus the learned positions resampled to each image's grid."""

    def __init__(self, config: PaddleOCRVisionConfig) -> None:
        super().__init__(config)
        self.position_embedding = Embedding(config.num_positions, config.hidden_size)
        self.side = int(config.num_positions**0.5)

    def forward(self, op, pixel_values, grid_thw, row, col):
        _, image = patch_images(op, pixel_values, grid_thw)
        h_taps, h_weights = half_pixel_taps(
            op, row, op.Gather(_column(op, grid_thw, 1), image), self.side
        )
        w_taps, w_weights = half_pixel_taps(
            op, col, op.Gather(_column(op, grid_thw, 2), image), self.side
        )
        side = op.Constant(value_int=self.side)
        # the four corners, h-tap major: [patches, 2, 2] -> [patches, 4]
        index = op.Add(op.Unsqueeze(op.Mul(h_taps, side), [2]), op.Unsqueeze(w_taps, [1]))
        weight = op.Mul(op.Unsqueeze(h_weights, [2]), op.Unsqueeze(w_weights, [1]))
        corners = op.Constant(value_ints=[0, 4])
        table = self.position_embedding(op, op.Reshape(index, corners))  # [patches, 4, hidden]
        weight = op.Unsqueeze(op.Reshape(weight, corners), [2])
        positions = op.ReduceSum(op.Mul(table, op.CastLike(weight, table)), [1], keepdims=0)
        return op.Add(super().forward(op, pixel_values), positions)


class PaddleOCRVisionModel(VideoLlama3VisionTower):
    """HF ``PaddleOCRVisionTransformer``: ``[patches, hidden]`` in the processor's row order."""

    def __init__(self, config: PaddleOCRVisionConfig) -> None:
        super().__init__(config)
        self.embeddings = PaddleOCRVisionEmbeddings(config)
        self.width = config.patch_width

    def forward(self, op, pixel_values, grid_thw):
        flat = op.Reshape(pixel_values, op.Constant(value_ints=[-1, self.width]))
        segment, row, col = patch_layout(op, flat, grid_thw, 1)
        x = self.embeddings(op, flat, grid_thw, row, col)
        cos, sin = self.rotary(op, row, col)
        x = self.encoder(op, x, cos, sin, same_group(op, segment))
        return self.post_layernorm(op, x)


class PaddleOCRVisionTower(nn.Module):
    """``vision_model``, as the checkpoint nests it under ``visual``."""

    def __init__(self, config: PaddleOCRVisionConfig) -> None:
        super().__init__()
        self.vision_model = PaddleOCRVisionModel(config)

    def forward(self, op, pixel_values, grid_thw):
        return self.vision_model(op, pixel_values, grid_thw)


def merge_block_order(op, patches, grid_thw, merge: int):
    """Per patch its row ``[patches]`` once each ``merge x merge`` block's patches are
    consecutive (blocks in row order, a block's patches row-major), from row-major frames."""
    index, image = patch_images(op, patches, grid_thw)
    _, row, col = patch_layout(op, patches, grid_thw, 1)
    width = op.Gather(_column(op, grid_thw, 2), image)
    cell = op.Add(op.Mul(row, width), col)  # the patch's place in its frame
    m = op.Constant(value_int=merge)
    block = op.Add(op.Mul(op.Div(row, m), op.Div(width, m)), op.Div(col, m))
    slot = op.Add(op.Mul(op.Mod(row, m), m), op.Mod(col, m))
    frame_start = op.Sub(index, cell)
    return op.Add(frame_start, op.Add(op.Mul(block, op.Constant(value_int=merge * merge)), slot))


class PaddleOCRProjector(nn.Module):
    """``pre_norm`` per patch, each ``merge x merge`` block concatenated, ``linear_1``, GELU,
    ``linear_2``."""

    def __init__(self, config: PaddleOCRVisionConfig, text_hidden: int) -> None:
        super().__init__()
        self.merge = config.spatial_merge_size
        self.width = config.hidden_size * self.merge**2
        self.pre_norm = LayerNorm(config.hidden_size, 1e-5)
        self.linear_1 = Linear(self.width, self.width, bias=True)
        self.act = get_activation("gelu")
        self.linear_2 = Linear(self.width, text_hidden, bias=True)

    def forward(self, op, features, grid_thw):
        x = self.pre_norm(op, features)  # [patches, hidden]
        order = merge_block_order(op, x, grid_thw, self.merge)
        x = op.ScatterND(
            op.ConstantOfShape(op.Shape(x), value=ir.tensor([0.0], dtype=x.dtype)),
            op.Unsqueeze(order, [1]),
            x,
        )
        x = op.Reshape(
            x, op.Constant(value_ints=[-1, self.width])
        )  # [image_tokens, hidden * merge^2]
        return self.linear_2(op, self.act(op, self.linear_1(op, x)))


@dataclass
class PaddleOCRVLConfig(VisionLanguageConfig):
    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        return dict(
            model_type=hf_config.model_type,
            vision=PaddleOCRVisionConfig.from_hf(hf_config.vision_config),
            text=PaddleOCRTextConfig.from_hf(cls.text_hf_config(hf_config)),
            image_token_id=int(hf_config.image_token_id),
        )


class PaddleOCRVLForConditionalGeneration(VisionLanguageModel):
    """``vision_tower`` (``visual``), ``multi_modal_projector`` (``projector``), and the
    M-RoPE ERNIE 4.5 ``language_model``."""

    config_class = PaddleOCRVLConfig

    #: transformers' layout, then the hub's (``visual``, ``mlp_AR``, the decoder under ``model``)
    renames = {
        "model.visual.": "vision_tower.",
        "model.projector.": "multi_modal_projector.",
        "model.language_model.": "language_model.model.",
        "visual.": "vision_tower.",
        "mlp_AR.": "multi_modal_projector.",
        "model.": "language_model.model.",
        "lm_head.": "language_model.lm_head.",
    }

    def __init__(self, config: PaddleOCRVLConfig) -> None:
        nn.Module.__init__(self)
        self.config = config
        self.vision_tower = PaddleOCRVisionTower(config.vision)
        self.multi_modal_projector = PaddleOCRProjector(config.vision, config.text.hidden_size)
        self.language_model = PaddleOCRTextForCausalLM(config.text)

    @property
    def ignored(self) -> tuple[str, ...]:
        """The hub checkpoint's tensors transformers does not load either."""
        extras = ("vision_tower.vision_model.head.*", "*packing_position_embedding*")
        return (*super().ignored, *extras)

    def vision_inputs(self, dtype) -> list[tuple]:
        v = self.config.vision
        return [
            ("pixel_values", dtype, ["num_patches", v.num_channels, v.patch_size, v.patch_size]),
            ("image_grid_thw", INT64, ["num_images", 3]),
        ]

    def position_ids_shape(self) -> list:
        return [3, "batch", "sequence"]

    def image_features(self, op, pixel_values, image_grid_thw):
        patches = self.vision_tower(op, pixel_values, image_grid_thw)  # [patches, hidden]
        return self.multi_modal_projector(op, patches, image_grid_thw)


MODEL_TYPES = {"paddleocr_vl": PaddleOCRVLForConditionalGeneration}
