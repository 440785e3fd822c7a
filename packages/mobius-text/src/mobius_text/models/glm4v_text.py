"""The text decoder of GLM-4.1V / GLM-4.5V (``glm4v_text``): GLM-4 over M-RoPE positions.

The layers are ``glm4``'s (norms after attention and after the MLP, a fused
``gate_up_proj``, interleaved partial rotary); q/k/v always carry biases. Positions
are ``[3, batch, sequence]`` as Qwen2-VL's: the rotary channel pairs are split by
``mrope_section`` (which covers ``rotary_dim / 2`` pairs) and section ``i`` takes its
angle from stream ``i % 3``.

Built only as the decoder of ``glm4v`` (3-D positions fit no plain causal-LM
contract), so not registered on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mobius.components import rotary_dim
from mobius.errors import ConfigError
from mobius_text.models.glm import Glm4ForCausalLM, Glm4Model, GlmConfig
from mobius_text.models.qwen2_vl_text import MRopeRotary


@dataclass
class Glm4vTextConfig(GlmConfig):
    mrope_section: list[int] = field(default_factory=lambda: [8, 12, 12])

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        return dict(fields, mrope_section=mrope_section(hf_config, fields), attention_bias=True)


def mrope_section(hf_config, fields: dict) -> list[int]:
    """The checked ``mrope_section`` of a GLM-V text config whose normalised ``fields`` are read:
    three sections that cover the rotary channel pairs."""
    rope = fields["rope"]
    if rope.rope_type != "default":
        raise ConfigError(f"{hf_config.model_type}: M-RoPE over {rope.rope_type!r} rope")
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    section = params.get("mrope_section", [8, 12, 12])
    if not isinstance(section, (list, tuple)) or not all(isinstance(s, int) for s in section):
        raise ConfigError(
            f"{hf_config.model_type}: mrope_section {section!r} is not a list of ints"
        )
    pairs = rotary_dim(rope, fields["head_dim"]) // 2
    if len(section) != 3 or min(section) < 0 or sum(section) != pairs:
        raise ConfigError(f"mrope_section {section} does not cover {pairs} rotary pairs")
    return list(section)


class Glm4vTextModel(Glm4Model):
    def __init__(self, config: Glm4vTextConfig) -> None:
        super().__init__(config)
        dim = rotary_dim(config.rope, config.head_dim)
        self.rotary_emb = MRopeRotary(config.rope.theta, dim, config.mrope_section)


class Glm4vTextForCausalLM(Glm4ForCausalLM):
    """GLM-4 over 3-D positions; built by ``glm4v`` (see the module docstring)."""

    config_class = Glm4vTextConfig
    model_class = Glm4vTextModel


MODEL_TYPES: dict = {}  # glm4v_text: a part of glm4v only
