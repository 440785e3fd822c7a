"""Qwen3-VL-MoE: Qwen3-VL's tower and DeepStack over the Qwen3-MoE decoder (``qwen3_vl_moe_text``)."""

from __future__ import annotations

from dataclasses import dataclass

from mobius_text.models.qwen3_vl_text import Qwen3VLMoeTextConfig, Qwen3VLMoeTextForCausalLM
from mobius_vision.models.qwen3_vl import Qwen3VLConfig, Qwen3VLForConditionalGeneration


@dataclass
class Qwen3VLMoeConfig(Qwen3VLConfig):
    text_config_class = Qwen3VLMoeTextConfig


class Qwen3VLMoeForConditionalGeneration(Qwen3VLForConditionalGeneration):
    config_class = Qwen3VLMoeConfig
    decoder_class = Qwen3VLMoeTextForCausalLM


MODEL_TYPES = {"qwen3_vl_moe": Qwen3VLMoeForConditionalGeneration}
