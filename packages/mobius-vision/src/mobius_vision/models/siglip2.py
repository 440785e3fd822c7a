"""SigLIP 2 as a dual encoder at its vision tower's native square grid (see :mod:`.siglip2_vision`).

The text tower is SigLIP's; the similarity is SigLIP's. The graph takes square
``pixel_values`` where transformers' ``Siglip2Model`` takes NaFlex patches, a
``pixel_attention_mask`` and ``spatial_shapes``: it matches it on what the
processor makes of a square image at ``max_num_patches = num_patches``.
"""

from __future__ import annotations

from dataclasses import dataclass

from mobius_text.models.siglip_text import SiglipTextConfig
from mobius_vision.models.siglip import SiglipConfig, SiglipModel
from mobius_vision.models.siglip2_vision import Siglip2VisionConfig, Siglip2VisionTransformer


@dataclass
class Siglip2Config(SiglipConfig):
    text_config_class = SiglipTextConfig
    vision_config_class = Siglip2VisionConfig


class Siglip2Model(SiglipModel):
    config_class = Siglip2Config
    vision_tower_class = Siglip2VisionTransformer


MODEL_TYPES = {"siglip2": Siglip2Model}
