"""Mistral and Ministral: Llama with sliding-window attention (all or some layers) and no biases."""

from __future__ import annotations

from dataclasses import dataclass

from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM


@dataclass
class MistralConfig(LlamaConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        # Mistral's modules take no bias flags: stray config keys must not add any.
        return {**super().hf_fields(hf_config), "attention_bias": False, "mlp_bias": False}


class MistralForCausalLM(LlamaForCausalLM):
    config_class = MistralConfig


MODEL_TYPES = {"mistral": MistralForCausalLM, "ministral": MistralForCausalLM}
