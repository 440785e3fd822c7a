"""SigLIP 2's vision tower (NaFlex) at its native square grid: SigLIP's tower with linear patches.

transformers' ``Siglip2VisionModel`` takes patches flattened by its processor
(``[batch, max_patches, patch*patch*channels]``), a ``pixel_attention_mask`` and
each image's ``spatial_shapes``, and resizes its ``sqrt(num_patches)``-square
position grid to each image's patch grid (antialiased bilinear). The graph takes
``pixel_values [batch, channels, size, size]`` at ``size = sqrt(num_patches) *
patch_size`` and cuts the patches as the processor does: that is the input the
processor makes of a square image at ``max_num_patches = num_patches``, where the
resize is the identity and no patch is padding, so the outputs match exactly.
Other aspect ratios (another patch grid, padded patches) are not built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Linear
from mobius.errors import ConfigError
from mobius_vision.models.clip_vision import PositionTable
from mobius_vision.models.siglip_vision import (
    SiglipVisionConfig,
    SiglipVisionModel,
    SiglipVisionTransformer,
)


@dataclass
class Siglip2VisionConfig(SiglipVisionConfig):
    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        num_patches = int(hf_config.num_patches)
        grid = math.isqrt(num_patches)
        if grid * grid != num_patches:
            raise ConfigError(
                f"num_patches {num_patches} is not a square: SigLIP 2's position grid is "
                "sqrt(num_patches) on a side"
            )
        size = grid * fields["patch_size"]
        return dict(fields, image_size=(size, size))


class Siglip2VisionEmbeddings(nn.Module):
    """Patches in the processor's order through ``patch_embedding`` (a Linear), plus the positions."""

    def __init__(self, config: Siglip2VisionConfig) -> None:
        super().__init__()
        p, d = config.patch_size, config.hidden_size
        self.patch_embedding = Linear(config.num_channels * p * p, d, bias=True)
        self.position_embedding = PositionTable(config.num_patches, d)
        self.patch, self.grid = p, config.image_size[0] // p

    def forward(self, op, pixel_values):
        p, g = self.patch, self.grid
        x = op.Reshape(
            pixel_values, op.Constant(value_ints=[0, 0, g, p, g, p])
        )  # [b, c, g, p, g, p]
        x = op.Transpose(x, perm=[0, 2, 4, 3, 5, 1])  # [batch, rows, cols, p, p, channels]
        x = op.Reshape(x, op.Constant(value_ints=[0, g * g, -1]))  # [batch, patches, p*p*c]
        return op.Add(self.patch_embedding(op, x), self.position_embedding(op))


class Siglip2VisionTransformer(SiglipVisionTransformer):
    """The tower (HF ``Siglip2VisionModel``) with every patch real: no attention mask."""

    embeddings_class = Siglip2VisionEmbeddings


class Siglip2VisionModel(SiglipVisionModel):
    config_class = Siglip2VisionConfig
    tower_class = Siglip2VisionTransformer


MODEL_TYPES = {"siglip2_vision_model": Siglip2VisionModel}
