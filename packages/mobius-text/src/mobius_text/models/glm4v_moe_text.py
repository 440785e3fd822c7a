"""The text decoder of GLM-4.5V (``glm4v_moe_text``): GLM-4-MoE over M-RoPE positions.

The layers are ``glm4_moe``'s (rotate-half partial rotary, DeepSeek-V3 routing, no
q/k norms); positions are ``[3, batch, sequence]``, the rotary channels split by
``mrope_section`` as in ``glm4v_text`` (here over the two halves, not pairs).

Built only as the decoder of ``glm4v_moe``, so not registered on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mobius.components import rotary_dim
from mobius_text.models.glm4_moe import Glm4MoeConfig, Glm4MoeForCausalLM, Glm4MoeModel
from mobius_text.models.glm4v_text import mrope_section
from mobius_text.models.qwen2_vl_text import MRopeRotary


@dataclass
class Glm4vMoeTextConfig(Glm4MoeConfig):
    mrope_section: list[int] = field(default_factory=lambda: [8, 12, 12])

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        return dict(fields, mrope_section=mrope_section(hf_config, fields), use_qk_norm=False)


class Glm4vMoeTextModel(Glm4MoeModel):
    def __init__(self, config: Glm4vMoeTextConfig) -> None:
        super().__init__(config)
        dim = rotary_dim(config.rope, config.head_dim)
        self.rotary_emb = MRopeRotary(config.rope.theta, dim, config.mrope_section)


class Glm4vMoeTextForCausalLM(Glm4MoeForCausalLM):
    """GLM-4-MoE over 3-D positions; built by ``glm4v_moe`` (see the module docstring)."""

    config_class = Glm4vMoeTextConfig
    model_class = Glm4vMoeTextModel


MODEL_TYPES: dict = {}  # glm4v_moe_text: a part of glm4v_moe only
