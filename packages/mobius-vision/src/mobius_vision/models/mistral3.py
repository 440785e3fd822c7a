"""Mistral 3 (Mistral Small 3.1, Ministral 3): Pixtral's tower, a patch-merging projector, any
text decoder (``mistral``, ``ministral3``...).

The image features are ``hidden_states[vision_feature_layer]`` of the tower, RMS-normed,
then each ``spatial_merge_size``-square block of an image's patch grid is concatenated
(channel-major, as ``torch.nn.functional.unfold`` lays it out) and merged by
``patch_merger.merging_layer``, then ``linear_1 -> act -> linear_2``.

Images of any size share one graph: the vision inputs are ``pixel_values`` (the
processor's padded batch) and ``image_sizes [num_images, 2]`` (each image's height and
width in pixels), from which the tower and the merger compute every image's grid.
transformers ties the output head to the embeddings by the top-level
``tie_word_embeddings`` (not the text config's); so does the build.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, RMSNorm, get_activation, module_scope
from mobius.errors import ConfigError
from mobius_vision.config import VisionLanguageConfig
from mobius_vision.models._vl import VisionLanguageModel, layer_index
from mobius_vision.models.pixtral import grid_cells


@dataclass
class Mistral3Config(VisionLanguageConfig):
    vision_feature_layer: int = -1
    projector_hidden_act: str = "gelu"
    multimodal_projector_bias: bool = False
    spatial_merge_size: int = 2

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        layer = hf_config.vision_feature_layer
        if isinstance(layer, (list, tuple)):
            if len(layer) != 1:
                # the projector's norm and merger are one layer wide: transformers fails too
                raise ConfigError(f"vision_feature_layer {layer!r}: Mistral 3 reads one layer")
            layer = layer[0]
        if fields["vision"].model_type != "pixtral":
            raise ConfigError(
                f"Mistral 3 merges Pixtral's patch grid, not {fields['vision'].model_type}'s"
            )
        tied = bool(getattr(hf_config, "tie_word_embeddings", True))
        return dict(
            fields,
            text=dataclasses.replace(fields["text"], tie_word_embeddings=tied),
            vision_feature_layer=int(layer),
            projector_hidden_act=hf_config.projector_hidden_act,
            multimodal_projector_bias=bool(hf_config.multimodal_projector_bias),
            spatial_merge_size=int(hf_config.spatial_merge_size),
        )


class Mistral3PatchMerger(nn.Module):
    """Each ``merge x merge`` block of an image's grid, concatenated, through ``merging_layer``."""

    def __init__(self, hidden_size: int, merge: int) -> None:
        super().__init__()
        self.merging_layer = Linear(hidden_size * merge * merge, hidden_size, bias=False)
        self.merge, self.hidden_size = merge, hidden_size
        # a block's cells as (row, column) offsets, in unfold's order
        self.block_rows = np.repeat(np.arange(merge, dtype=np.int64), merge)
        self.block_cols = np.tile(np.arange(merge, dtype=np.int64), merge)

    def forward(self, op, x, counts, grid):
        """``x [patches, hidden]`` (images' grids row-major), ``counts [images, 2]``, ``grid [2]``."""
        s = op.Constant(value_int=self.merge)
        tokens = op.ReduceProd(counts, [1], keepdims=0)  # [images]
        starts = op.Sub(op.CumSum(tokens, op.Constant(value_int=0)), tokens)
        image, row, col = grid_cells(op, op.Div(counts, s), op.Div(grid, s))  # the blocks
        width = op.Gather(op.Squeeze(op.Slice(counts, [1], [2], [1]), [1]), image)  # [blocks]
        first = op.Add(op.Gather(starts, image), op.Mul(op.Add(op.Mul(row, width), col), s))
        offsets = op.Add(
            op.Mul(op.Constant(value=ir.tensor(self.block_rows)), op.Unsqueeze(width, [1])),
            op.Constant(value=ir.tensor(self.block_cols)),
        )  # [blocks, merge * merge]
        cells = op.Gather(x, op.Add(op.Unsqueeze(first, [1]), offsets), axis=0)
        # unfold's channel order: hidden outermost, then the block's cells
        cells = op.Transpose(cells, perm=[0, 2, 1])  # [blocks, hidden, merge * merge]
        width = self.hidden_size * self.merge * self.merge
        blocks = op.Concat(op.Shape(cells, start=0, end=1), op.Constant(value_ints=[width]), axis=0)
        return self.merging_layer(op, op.Reshape(cells, blocks))


class Mistral3MultiModalProjector(nn.Module):
    def __init__(self, config: Mistral3Config) -> None:
        super().__init__()
        d, text = config.vision.hidden_size, config.text.hidden_size
        bias = config.multimodal_projector_bias
        self.norm = RMSNorm(d, config.text.rms_norm_eps)
        self.patch_merger = Mistral3PatchMerger(d, config.spatial_merge_size)
        self.linear_1 = Linear(d, text, bias=bias)
        self.act = get_activation(config.projector_hidden_act)
        self.linear_2 = Linear(text, text, bias=bias)

    def forward(self, op, x, counts, grid):
        x = self.patch_merger(op, self.norm(op, x), counts, grid)  # [blocks, vision_hidden]
        return self.linear_2(op, self.act(op, self.linear_1(op, x)))


class Mistral3ForConditionalGeneration(VisionLanguageModel):
    """Pixtral's tower (up to ``vision_feature_layer``), the merging projector, the text decoder."""

    config_class = Mistral3Config

    def make_projector(self, config: Mistral3Config) -> nn.Module:
        return Mistral3MultiModalProjector(config)

    @property
    def feature_layer(self) -> int:
        return layer_index(self.config.vision_feature_layer, self.config.vision.num_hidden_layers)

    def vision_inputs(self, dtype) -> list[tuple]:
        channels = self.config.vision.num_channels
        return [
            ("pixel_values", dtype, ["num_images", channels, "height", "width"]),
            ("image_sizes", ir.DataType.INT64, ["num_images", 2]),
        ]

    def image_features(self, op, pixel_values, image_sizes):
        tower, layer = self.vision_tower, self.feature_layer
        with module_scope(op, tower):
            states = tower.hidden_states(op, pixel_values, layer, image_sizes)
            counts, grid = tower.patch_counts(op, pixel_values, image_sizes)
        x = op.Squeeze(states[layer], [0])  # [patches, vision_hidden]
        return self.multi_modal_projector(op, x, counts, grid)  # [image_tokens, text_hidden]

    @property
    def ignored(self) -> tuple[str, ...]:
        depth = self.config.vision.num_hidden_layers
        layers = [
            f"vision_tower.transformer.layers.{i}.*" for i in range(self.feature_layer, depth)
        ]
        return (*super().ignored, *layers)


MODEL_TYPES = {"mistral3": Mistral3ForConditionalGeneration}
