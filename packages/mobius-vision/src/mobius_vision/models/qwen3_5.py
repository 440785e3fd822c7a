"""Qwen3.5 and Qwen3.5-MoE: Qwen3-VL's patch tower without DeepStack, over the Qwen3.5 hybrid decoders.

The tower (``visual`` in the checkpoint) is Qwen3-VL's: a biased Conv3d patch embedding,
learned positions resampled bilinearly to each image's grid, LayerNorm blocks with 2-D
rotary attention within each frame, and the ``merger`` to the decoder's width. It has no
``deepstack_visual_indexes`` and no DeepStack mergers, so the vision graph writes
``image_features`` only and the decoder reads nothing but the merged embeddings.

The decoders are mobius-text's ``qwen3_5_text`` / ``qwen3_5_moe_text`` (Gated DeltaNet
and gated full-attention layers) as their text-only builds make them, except for their
positions: here they read ``position_ids [3, batch, sequence]`` (the rope indices the
model's ``get_rope_index`` computes) and rotate the ``partial_rotary_factor`` channels
with Qwen3-VL's interleaved M-RoPE (``mrope_section``, transformers' default
``[11, 11, 10]``). The cache is the text decoder's: ``conv_state`` / ``ssm_state`` per
linear-attention layer, key / value per full-attention layer.

Hub checkpoints also carry the multi-token-prediction head (``mtp.*``), which generation
does not use: it is ignored, as transformers ignores it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from mobius.components import rotary_dim
from mobius.errors import ConfigError
from mobius_text.models.qwen3_5 import (
    Qwen3_5ForCausalLM,
    Qwen3_5MoeForCausalLM,
    Qwen3_5MoeTextConfig,
    Qwen3_5TextConfig,
    Qwen3_5TextModel,
)
from mobius_text.models.qwen3_vl_text import InterleavedMRopeRotary
from mobius_vision.models.qwen2_5_vl import _Attributes
from mobius_vision.models.qwen2_vl import (
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    patch_layout,
    same_group,
)
from mobius_vision.models.qwen3_vl import Qwen3VLVisionConfig, Qwen3VLVisionTower

#: transformers' ``Qwen3_5TextRotaryEmbedding`` section when the config names none
DEFAULT_MROPE_SECTION = [11, 11, 10]


@dataclass
class Qwen3_5VisionConfig(Qwen3VLVisionConfig):
    """Qwen3-VL's tower settings with no DeepStack level."""

    @classmethod
    def from_hf(cls, hf: Any) -> Qwen3_5VisionConfig:
        # Qwen3-VL's reading requires a level: read over a stand-in one, then drop it
        with_level = _Attributes(dict(vars(hf), deepstack_visual_indexes=[0]))
        return dataclasses.replace(super().from_hf(with_level), deepstack_visual_indexes=())


class Qwen3_5VisionTower(Qwen3VLVisionTower):
    """HF ``Qwen3_5VisionModel``: Qwen3-VL's tower returning the merged features only."""

    def forward(self, op, pixel_values, grid_thw):
        segment, row, col = patch_layout(op, pixel_values, grid_thw, self.config.spatial_merge_size)
        x = self.patch_embed(op, pixel_values)  # [patches, embed]
        x = op.Add(x, self.positions(op, pixel_values, grid_thw, row, col))
        cos, sin = self.rotary(op, row, col)
        mask = same_group(op, segment)
        for block in self.blocks:
            x = block(op, x, cos, sin, mask)
        return self.merger(op, x)  # [image_tokens, text_hidden]


@dataclass
class _MRopeSection:
    """A Qwen3.5 text config's interleaved M-RoPE section (mixed in before the text config)."""

    mrope_section: list[int] = field(default_factory=lambda: list(DEFAULT_MROPE_SECTION))

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        rope = fields["rope"]
        if rope.rope_type != "default":
            raise ConfigError(f"{hf_config.model_type}: M-RoPE over {rope.rope_type!r} rope")
        params = dict(getattr(hf_config, "rope_parameters", None) or {})
        section = [int(s) for s in params.get("mrope_section", DEFAULT_MROPE_SECTION)]
        channels = rotary_dim(rope, fields["head_dim"]) // 2
        if len(section) != 3 or sum(section) != channels:
            raise ConfigError(
                f"{hf_config.model_type}: mrope_section {section} does not cover the "
                f"{channels} rotary channel pairs"
            )
        return dict(fields, mrope_section=section)


@dataclass
class Qwen3_5VLTextConfig(_MRopeSection, Qwen3_5TextConfig):
    pass


@dataclass
class Qwen3_5MoeVLTextConfig(_MRopeSection, Qwen3_5MoeTextConfig):
    pass


class Qwen3_5VLTextModel(Qwen3_5TextModel):
    """The Qwen3.5 text model rotating by 3-D positions."""

    def __init__(self, config) -> None:
        super().__init__(config)
        dim = rotary_dim(config.rope, config.head_dim)
        self.rotary_emb = InterleavedMRopeRotary(config.rope.theta, dim, config.mrope_section)


class Qwen3_5VLTextForCausalLM(Qwen3_5ForCausalLM):
    """``qwen3_5_text`` over 3-D positions: the decoder of ``qwen3_5``."""

    config_class = Qwen3_5VLTextConfig
    model_class = Qwen3_5VLTextModel


class Qwen3_5MoeVLTextForCausalLM(Qwen3_5MoeForCausalLM):
    """``qwen3_5_moe_text`` over 3-D positions: the decoder of ``qwen3_5_moe``."""

    config_class = Qwen3_5MoeVLTextConfig
    model_class = Qwen3_5VLTextModel


@dataclass
class Qwen3_5Config(Qwen2VLConfig):
    vision_config_class = Qwen3_5VisionConfig
    text_config_class = Qwen3_5VLTextConfig


@dataclass
class Qwen3_5MoeConfig(Qwen3_5Config):
    text_config_class = Qwen3_5MoeVLTextConfig


class Qwen3_5ForConditionalGeneration(Qwen2VLForConditionalGeneration):
    """Qwen2-VL's composition (tower, M-RoPE decoder) with the Qwen3.5 tower and decoder."""

    config_class = Qwen3_5Config
    tower_class = Qwen3_5VisionTower
    decoder_class = Qwen3_5VLTextForCausalLM

    @property
    def ignored(self) -> tuple[str, ...]:
        return (*super().ignored, "mtp.*")  # the multi-token-prediction head


class Qwen3_5MoeForConditionalGeneration(Qwen3_5ForConditionalGeneration):
    config_class = Qwen3_5MoeConfig
    decoder_class = Qwen3_5MoeVLTextForCausalLM


MODEL_TYPES = {
    "qwen3_5": Qwen3_5ForConditionalGeneration,
    "qwen3_5_moe": Qwen3_5MoeForConditionalGeneration,
}
