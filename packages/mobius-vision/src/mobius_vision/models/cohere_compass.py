"""Cohere Compass (North Vision): Qwen3-VL's tower and DeepStack over a Cohere Compass decoder.

transformers' ``CohereCompassForConditionalGeneration`` is Qwen3-VL's class with the
text decoder swapped: the tower (``cohere_compass_vision``) is Qwen3-VL's patch tower
with learned positions and DeepStack mergers, unchanged; the decoder is mobius-text's
``cohere_compass_text`` (Cohere2's parallel block, rotate-half RoPE set per layer type,
NoPE layers where a type's ``rope_parameters`` entry is None) except for its positions.
Here it reads ``position_ids [3, batch, sequence]`` (the model's ``get_rope_index``)
and rotates each layer type with Qwen3-VL's interleaved M-RoPE by that type's
``rope_theta`` and ``mrope_section`` (transformers' default ``[24, 20, 20]``). The
DeepStack levels are added after the first decoder layers, as in Qwen3-VL, and the
logits are multiplied by the text config's ``logit_scale`` when it sets one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mobius.config import RopeConfig
from mobius.errors import ConfigError
from mobius_text.models.cohere_compass_text import (
    CohereCompassForCausalLM,
    CohereCompassTextConfig,
    CohereCompassTextModel,
)
from mobius_text.models.qwen3_vl_text import DEFAULT_MROPE_SECTION, InterleavedMRopeRotary
from mobius_vision.models.qwen3_vl import Qwen3VLConfig, Qwen3VLForConditionalGeneration


@dataclass
class CohereCompassVLTextConfig(CohereCompassTextConfig):
    #: Per layer type with RoPE, its interleaved M-RoPE section (temporal, height, width).
    mrope_sections: dict[str, list[int]] = field(default_factory=dict)

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        params = hf_config.rope_parameters
        sections = {}
        for kind, rope in fields["layer_ropes"].items():
            if rope is None:
                continue
            sections[kind] = mrope_section(hf_config.model_type, kind, rope, params[kind])
            _check_covers(hf_config.model_type, sections[kind], fields["head_dim"])
        return dict(fields, mrope_sections=sections)


def mrope_section(model_type: str, kind: str, rope: RopeConfig, params: dict) -> list[int]:
    """A layer type's M-RoPE section, for the default rope only."""
    if rope.rope_type != "default":
        raise ConfigError(f"{model_type}: M-RoPE over {rope.rope_type!r} rope ({kind})")
    section = params.get("mrope_section", DEFAULT_MROPE_SECTION)
    if not isinstance(section, (list, tuple)) or not all(isinstance(s, int) for s in section):
        raise ConfigError(
            f"{model_type}: mrope_section {section!r} of {kind} is not a list of ints"
        )
    return list(section)


def _check_covers(model_type: str, section: list[int], head_dim: int) -> None:
    if len(section) != 3 or sum(section) != head_dim // 2 or min(section) < 0:
        raise ConfigError(
            f"{model_type}: mrope_section {section} does not cover the {head_dim // 2} "
            "rotary channel pairs"
        )


class CohereCompassVLTextModel(CohereCompassTextModel):
    """The Cohere Compass text model rotating by 3-D positions."""

    def make_rotary(self, config: CohereCompassVLTextConfig, kind: str):
        theta = config.layer_ropes[kind].theta
        return InterleavedMRopeRotary(theta, config.head_dim, config.mrope_sections[kind])


class CohereCompassVLTextForCausalLM(CohereCompassForCausalLM):
    """``cohere_compass_text`` over 3-D positions: the decoder of ``cohere_compass``."""

    config_class = CohereCompassVLTextConfig
    model_class = CohereCompassVLTextModel


@dataclass
class CohereCompassConfig(Qwen3VLConfig):
    text_config_class = CohereCompassVLTextConfig
    #: transformers' VL class multiplies its logits by the text config's logit_scale
    text_head_applied = ("logit_scale",)


class CohereCompassForConditionalGeneration(Qwen3VLForConditionalGeneration):
    """Qwen3-VL's composition (tower, DeepStack) over the Cohere Compass M-RoPE decoder."""

    config_class = CohereCompassConfig
    decoder_class = CohereCompassVLTextForCausalLM


MODEL_TYPES = {"cohere_compass": CohereCompassForConditionalGeneration}
