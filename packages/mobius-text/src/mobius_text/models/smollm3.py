"""SmolLM3: Llama with NoPE layers (no rotary embedding on every ``no_rope_layer_interval``-th layer)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel


@dataclass
class SmolLM3Config(LlamaConfig):
    # 1 where the layer uses RoPE, 0 where it is a NoPE layer (HF's ``no_rope_layers``).
    no_rope_layers: list[int] = field(default_factory=list)

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        fields["no_rope_layers"] = list(hf_config.no_rope_layers)
        return fields


class SmolLM3Model(LlamaModel):
    def layer_uses_rope(self, layer_idx: int) -> bool:
        return bool(self.config.no_rope_layers[layer_idx])


class SmolLM3ForCausalLM(LlamaForCausalLM):
    config_class = SmolLM3Config
    model_class = SmolLM3Model


MODEL_TYPES = {"smollm3": SmolLM3ForCausalLM}
