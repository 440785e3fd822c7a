"""Idefics3: Idefics3's vision tower over image tiles, a pixel-shuffle connector, any text decoder.

The vision graph takes what ``Idefics3Processor`` gives: ``pixel_values`` float
``[batch, tiles, channels, size, size]`` (``size`` = the tower's ``image_size``; a
split image's crops then its global view, images of one prompt in order, padded
with all-zero tiles to the batch's largest count) and ``pixel_attention_mask``
int64 ``[batch, tiles, size, size]`` (1 on real pixels). As transformers does, the
all-zero tiles are dropped, each patch is real when any of its pixels is, the tower
runs on the real tiles, and the connector folds each ``scale_factor x scale_factor``
block of patch states into one token (``pixel_shuffle``) before
``modality_projection.proj``: ``image_features [real_tiles * tokens, text_hidden]``, in
the order the processor writes the ``<image>`` placeholders.

Checkpoints name the parts ``model.vision_model``, ``model.connector``,
``model.text_model`` and ``lm_head``; they map onto the shared ``vision_tower``,
``multi_modal_projector`` and ``language_model`` (the registry's text decoder).
The output head is tied to the embeddings when the top-level config says so (the
text config's own flag is not what transformers reads).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear
from mobius.errors import ConfigError
from mobius_vision.config import VisionLanguageConfig
from mobius_vision.models._vl import VisionLanguageModel, flatten_images


@dataclass
class Idefics3Config(VisionLanguageConfig):
    scale_factor: int = 2

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        vision, scale = fields["vision"], int(hf_config.scale_factor)
        if not hasattr(vision, "patches_per_side"):
            raise ConfigError(f"{vision.model_type} is not an Idefics3 vision tower")
        if vision.patches_per_side % scale:
            raise ConfigError(
                f"{vision.patches_per_side} patches a side do not fold by scale_factor {scale}"
            )
        tied = bool(getattr(hf_config, "tie_word_embeddings", False))
        text = dataclasses.replace(fields["text"], tie_word_embeddings=tied)
        return dict(fields, text=text, scale_factor=scale)


class Idefics3SimpleMLP(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.proj = Linear(in_features, out_features, bias=False)

    def forward(self, op, x):
        return self.proj(op, x)


class Idefics3Connector(nn.Module):
    """``pixel_shuffle`` by ``scale`` then ``modality_projection``: ``[tiles, tokens, text_hidden]``."""

    def __init__(self, side: int, width: int, scale: int, text_hidden: int) -> None:
        super().__init__()
        self.side, self.width, self.scale = side, width, scale
        self.modality_projection = Idefics3SimpleMLP(width * scale * scale, text_hidden)

    def pixel_shuffle(self, op, x):
        """transformers' ``pixel_shuffle``: ``[tiles, side*side, d]`` -> ``[tiles, side²/s², d*s²]``."""
        side, d, s = self.side, self.width, self.scale
        x = op.Reshape(x, op.Constant(value_ints=[0, side, side // s, d * s]))
        x = op.Transpose(x, perm=[0, 2, 1, 3])  # [tiles, side/s, side, d*s]
        x = op.Reshape(x, op.Constant(value_ints=[0, side // s, side // s, d * s * s]))
        x = op.Transpose(x, perm=[0, 2, 1, 3])
        return op.Reshape(x, op.Constant(value_ints=[0, (side // s) ** 2, d * s * s]))

    def forward(self, op, x):
        return self.modality_projection(op, self.pixel_shuffle(op, x))


def patch_mask(op, pixel_mask, vision):
    """``[tiles, size/p, size/p]`` bool from int64 ``pixel_mask [tiles, size, size]``: a patch of
    the ``vision`` tower's grid is real when any of its pixels is."""
    p, grid = vision.patch_size, vision.patches_per_side
    m = op.Slice(pixel_mask, [0, 0], [grid * p, grid * p], [1, 2])  # unfold drops the rest
    m = op.Reshape(m, op.Constant(value_ints=[0, grid, p, grid, p]))
    zero = op.Constant(value=ir.tensor(np.array(0, np.int64)))
    return op.Greater(op.ReduceSum(m, [2, 4], keepdims=0), zero)


class Idefics3ForConditionalGeneration(VisionLanguageModel):
    config_class = Idefics3Config

    def make_projector(self, config: Idefics3Config) -> nn.Module:
        v = config.vision
        return Idefics3Connector(
            v.patches_per_side, v.hidden_size, config.scale_factor, config.text.hidden_size
        )

    def vision_inputs(self, dtype) -> list[tuple]:
        size = self.config.vision.image_size[0]
        channels = self.config.vision.num_channels
        return [
            ("pixel_values", dtype, ["batch", "num_tiles", channels, size, size]),
            ("pixel_attention_mask", ir.DataType.INT64, ["batch", "num_tiles", size, size]),
        ]

    def real_tiles(self, op, pixel_values):
        """``[tiles]`` bool: the tiles that are not all zeros (padding)."""
        zero = op.CastLike(op.Constant(value_float=0.0), pixel_values)
        nonzero = op.Cast(op.Not(op.Equal(pixel_values, zero)), to=ir.DataType.INT64)
        none = op.Constant(value=ir.tensor(np.array(0, np.int64)))
        return op.Greater(op.ReduceMax(nonzero, [1, 2, 3], keepdims=0), none)

    def patch_mask(self, op, pixel_mask):
        """``[tiles, size/p, size/p]`` bool: a patch is real when any of its pixels is."""
        return patch_mask(op, pixel_mask, self.config.vision)

    def image_features(self, op, pixel_values, pixel_attention_mask):
        size, channels = self.config.vision.image_size[0], self.config.vision.num_channels
        tiles = op.Reshape(pixel_values, op.Constant(value_ints=[-1, channels, size, size]))
        masks = op.Reshape(pixel_attention_mask, op.Constant(value_ints=[-1, size, size]))
        real = self.real_tiles(op, tiles)
        tiles, masks = op.Compress(tiles, real, axis=0), op.Compress(masks, real, axis=0)
        states = self.vision_tower(op, tiles, self.patch_mask(op, masks))  # [tiles, patches, d]
        return flatten_images(op, self.multi_modal_projector(op, states))

    renames = {
        "model.vision_model.": "vision_tower.",
        "model.connector.": "multi_modal_projector.",
        "model.text_model.": "language_model.model.",
        "lm_head.": "language_model.lm_head.",
    }


MODEL_TYPES = {"idefics3": Idefics3ForConditionalGeneration}
