"""GLM-4.5V (``glm4v_moe``): GLM-4.1V's tower over a GLM-4-MoE M-RoPE decoder."""

from __future__ import annotations

from dataclasses import dataclass

from mobius_text.models.glm4v_moe_text import Glm4vMoeTextConfig, Glm4vMoeTextForCausalLM
from mobius_vision.models.glm4v import Glm4vConfig, Glm4vForConditionalGeneration


@dataclass
class Glm4vMoeConfig(Glm4vConfig):
    text_config_class = Glm4vMoeTextConfig


class Glm4vMoeForConditionalGeneration(Glm4vForConditionalGeneration):
    config_class = Glm4vMoeConfig
    decoder_class = Glm4vMoeTextForCausalLM


MODEL_TYPES = {"glm4v_moe": Glm4vMoeForConditionalGeneration}
