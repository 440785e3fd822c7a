"""Solar Open: GLM-4-MoE with every layer a MoE block and no q/k norm (Llama attention, no o_proj bias)."""

from __future__ import annotations

from dataclasses import dataclass

from mobius_text.models.glm4_moe import Glm4MoeConfig, Glm4MoeForCausalLM


@dataclass
class SolarOpenConfig(Glm4MoeConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        layers = fields["num_hidden_layers"]
        return {**fields, "mlp_layer_types": ["sparse"] * layers, "use_qk_norm": False}


class SolarOpenForCausalLM(Glm4MoeForCausalLM):
    config_class = SolarOpenConfig


MODEL_TYPES = {"solar_open": SolarOpenForCausalLM}
