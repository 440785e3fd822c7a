"""LFM2-VL: SigLIP 2's NaFlex tower over patch lists of any grid, a pixel-unshuffle MLP, LFM2.

The vision inputs are what ``Lfm2VlImageProcessor`` gives: ``pixel_values [images,
max_patches, 3 * p * p]`` (each image's patches row-major, zero rows after them),
``spatial_shapes [images, 2]`` (each image's patch rows and columns) and
``pixel_attention_mask [images, max_patches]``. The tower embeds the patches, adds its
square position table resized to each image's grid (transformers' antialiased bilinear
weights, computed here from the grid, so one graph serves every size), masks the padding
patches as keys, and ends with ``post_layernorm``. The projector folds each ``factor x
factor`` block of patches into one token, the block's rows then columns then channels
(``pixel_unshuffle``), through ``layer_norm``, ``linear_1``, the activation and
``linear_2``: ``(rows / f) * (columns / f)`` tokens per image, image after image.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear, get_activation
from mobius.errors import ConfigError
from mobius_vision.config import VisionLanguageConfig
from mobius_vision.models._vl import VisionLanguageModel, text_decoder
from mobius_vision.models.clip_vision import CLIPEncoder, PositionTable
from mobius_vision.models.idefics3_vision import key_bias
from mobius_vision.models.siglip2_vision import Siglip2VisionConfig

FLOAT, INT64 = ir.DataType.FLOAT, ir.DataType.INT64


def _column(op, table, i):
    return op.Squeeze(op.Slice(table, [i], [i + 1], [1]), [1])  # [rows of table]


class NaFlexEmbeddings(nn.Module):
    """``patch_embedding`` of each patch row plus the position table resized to its image."""

    def __init__(self, config: Siglip2VisionConfig) -> None:
        super().__init__()
        p, d = config.patch_size, config.hidden_size
        self.patch_embedding = Linear(config.num_channels * p * p, d, bias=True)
        self.position_embedding = PositionTable(config.num_patches, d)
        self.side = config.image_size[0] // p

    def forward(self, op, pixel_values, spatial_shapes):
        table = self.position_embedding(op)  # [side * side, d] (or [1, ...]: flattened below)
        table = op.Reshape(table, op.Constant(value_ints=[self.side * self.side, -1]))
        weights = self.resize_weights(op, pixel_values, spatial_shapes)  # [n, P, side * side]
        # resampled in float32, then in the activations' type, as transformers does
        positions = op.MatMul(weights, op.Cast(table, to=FLOAT))
        patches = self.patch_embedding(op, pixel_values)
        return op.Add(patches, op.CastLike(positions, patches))

    def resize_weights(self, op, pixel_values, spatial_shapes):
        """``[images, max_patches, side * side]``: the antialiased bilinear weights of each
        patch's (row, column) on its image's grid; padding patches take (0, 0)'s."""
        side = op.Constant(value_float=float(self.side))
        length = op.Squeeze(op.Shape(pixel_values, start=1, end=2), [0])
        positions = op.Cast(
            op.Range(op.Constant(value_int=0), length, op.Constant(value_int=1)), to=FLOAT
        )
        positions = op.Unsqueeze(positions, [0])  # [1, P]
        sizes = op.Cast(spatial_shapes, to=FLOAT)
        rows_n, cols_n = (op.Unsqueeze(_column(op, sizes, i), [1]) for i in range(2))  # [n, 1]
        rows = op.Floor(op.Div(positions, cols_n))
        cols = op.Sub(positions, op.Mul(rows, cols_n))
        real = op.Cast(op.Less(positions, op.Mul(rows_n, cols_n)), to=FLOAT)
        source = op.Constant(value=ir.tensor(np.arange(self.side, dtype=np.float32)))

        def axis_weights(index, size):  # [n, P, side], normalised
            scale = op.Div(side, size)  # [n, 1]
            support = op.Max(scale, op.Constant(value_float=1.0))
            half = op.Constant(value_float=0.5)
            center = op.Sub(op.Mul(op.Add(op.Mul(index, real), half), scale), half)
            distance = op.Abs(op.Sub(source, op.Unsqueeze(center, [2])))
            w = op.Relu(
                op.Sub(op.Constant(value_float=1.0), op.Div(distance, op.Unsqueeze(support, [2])))
            )
            return op.Div(w, op.ReduceSum(w, [2], keepdims=1))

        wr, wc = axis_weights(rows, rows_n), axis_weights(cols, cols_n)
        both = op.Mul(op.Unsqueeze(wr, [3]), op.Unsqueeze(wc, [2]))  # [n, P, side, side]
        return op.Reshape(both, op.Constant(value_ints=[0, 0, self.side * self.side]))


class NaFlexVisionTransformer(nn.Module):
    """HF ``Siglip2VisionTransformer`` over padded patch lists (no pooling head)."""

    def __init__(self, config: Siglip2VisionConfig) -> None:
        super().__init__()
        self.embeddings = NaFlexEmbeddings(config)
        self.encoder = CLIPEncoder(config)
        self.post_layernorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, pixel_values, spatial_shapes, pixel_attention_mask):
        x = self.embeddings(op, pixel_values, spatial_shapes)  # [n, P, d]
        mask = op.Cast(pixel_attention_mask, to=ir.DataType.BOOL)
        x = self.encoder(op, x, key_bias(op, mask, x), None)[-1]
        return self.post_layernorm(op, x)


@dataclass
class Lfm2VlConfig(VisionLanguageConfig):
    downsample_factor: int = 2
    projector_hidden_size: int = 2560
    projector_hidden_act: str = "gelu"
    projector_bias: bool = True
    projector_use_layernorm: bool = True

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        if not isinstance(fields["vision"], Siglip2VisionConfig):
            raise ConfigError(f"{fields['vision'].model_type} is not a SigLIP 2 tower")
        factor = hf_config.downsample_factor
        if not isinstance(factor, int) or factor < 1:
            raise ConfigError(f"downsample_factor {factor!r} is not a positive int")
        return dict(
            fields,
            downsample_factor=factor,
            projector_hidden_size=int(hf_config.projector_hidden_size),
            projector_hidden_act=hf_config.projector_hidden_act,
            projector_bias=bool(hf_config.projector_bias),
            projector_use_layernorm=bool(hf_config.projector_use_layernorm),
        )


class Lfm2VlMultiModalProjector(nn.Module):
    def __init__(self, config: Lfm2VlConfig) -> None:
        super().__init__()
        width = config.vision.hidden_size * config.downsample_factor**2
        bias = config.projector_bias
        self.layer_norm = LayerNorm(width, 1e-5) if config.projector_use_layernorm else None
        self.linear_1 = Linear(width, config.projector_hidden_size, bias=bias)
        self.act = get_activation(config.projector_hidden_act)
        self.linear_2 = Linear(config.projector_hidden_size, config.text.hidden_size, bias=bias)

    def forward(self, op, x):
        if self.layer_norm is not None:
            x = self.layer_norm(op, x)
        return self.linear_2(op, self.act(op, self.linear_1(op, x)))


def unshuffled_patches(op, states, spatial_shapes, factor: int):
    """``[tokens, f * f * d]``: each image's ``f x f`` patch blocks, row-major, image after
    image, each block's patches row by row (``pixel_unshuffle``'s order)."""
    f = op.Constant(value_int=factor)
    rows, cols = _column(op, spatial_shapes, 0), _column(op, spatial_shapes, 1)
    blocks_wide = op.Div(cols, f)
    tokens = op.Mul(op.Div(rows, f), blocks_wide)  # [n]
    ends = op.CumSum(tokens, op.Constant(value_int=0))
    total = op.ReduceSum(tokens, keepdims=0)
    token = op.Range(op.Constant(value_int=0), total, op.Constant(value_int=1))
    image = op.ReduceSum(
        op.Cast(op.GreaterOrEqual(op.Unsqueeze(token, [1]), op.Unsqueeze(ends, [0])), to=INT64),
        [1],
        keepdims=0,
    )  # [tokens]
    local = op.Sub(token, op.Gather(op.Sub(ends, tokens), image))
    wide = op.Gather(blocks_wide, image)
    offsets = np.arange(factor, dtype=np.int64)
    row = op.Add(
        op.Unsqueeze(op.Mul(op.Div(local, wide), f), [1, 2]),
        op.Constant(value=ir.tensor(offsets[:, None])),
    )  # [tokens, f, 1]
    col = op.Add(
        op.Unsqueeze(op.Mul(op.Mod(local, wide), f), [1, 2]),
        op.Constant(value=ir.tensor(offsets[None, :])),
    )  # [tokens, 1, f]
    length = op.Shape(states, start=1, end=2)
    start = op.Unsqueeze(op.Mul(image, length), [1, 2])
    index = op.Add(start, op.Add(op.Mul(row, op.Unsqueeze(op.Gather(cols, image), [1, 2])), col))
    flat = op.Reshape(states, op.Concat([-1], op.Shape(states, start=2), axis=0))  # [n * P, d]
    picked = op.Gather(flat, index, axis=0)  # [tokens, f, f, d]
    width = op.Mul(op.Shape(states, start=2), op.Constant(value_ints=[factor * factor]))
    return op.Reshape(picked, op.Concat([-1], width, axis=0))


class Lfm2VlForConditionalGeneration(VisionLanguageModel):
    """The NaFlex tower, the unshuffle projector and the LFM2 decoder."""

    config_class = Lfm2VlConfig
    # hub checkpoints keep the tower's vision_model level; transformers 5 saves without it
    renames = {"model.vision_tower.vision_model.": "vision_tower.", **VisionLanguageModel.renames}

    def __init__(self, config: Lfm2VlConfig) -> None:
        nn.Module.__init__(self)
        self.config = config
        # the registered siglip2 tower reads square images only: the NaFlex one is built here
        self.vision_tower = NaFlexVisionTransformer(config.vision)
        self.multi_modal_projector = Lfm2VlMultiModalProjector(config)
        self.language_model = text_decoder(config.text)

    def vision_inputs(self, dtype) -> list[tuple]:
        v = self.config.vision
        width = v.num_channels * v.patch_size**2
        return [
            ("pixel_values", dtype, ["num_images", "max_patches", width]),
            ("spatial_shapes", INT64, ["num_images", 2]),
            ("pixel_attention_mask", INT64, ["num_images", "max_patches"]),
        ]

    def image_features(self, op, pixel_values, spatial_shapes, pixel_attention_mask):
        states = self.vision_tower(op, pixel_values, spatial_shapes, pixel_attention_mask)
        patches = unshuffled_patches(op, states, spatial_shapes, self.config.downsample_factor)
        return self.multi_modal_projector(op, patches)  # [image_tokens, text_hidden]

    @property
    def ignored(self) -> tuple[str, ...]:
        # transformers builds SigLIP 2's pooling head, which LFM2-VL never runs
        return (*super().ignored, "vision_tower.head.*")


MODEL_TYPES = {"lfm2_vl": Lfm2VlForConditionalGeneration}
