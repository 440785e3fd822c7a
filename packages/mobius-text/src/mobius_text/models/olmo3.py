"""OLMo 3: OLMo 2 with sliding-window layers and a RoPE schedule per layer type.

``layer_types`` defaults to three sliding-window layers then one full-attention
layer; ``rope_parameters`` holds one entry per layer type (HF puts a legacy
``rope_scaling`` on the full-attention layers only).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mobius.config import RopeConfig
from mobius_text.models._rope_by_type import RotaryByLayerType, rope_by_layer_type_fields
from mobius_text.models.olmo2 import Olmo2Config, Olmo2ForCausalLM, Olmo2Model


@dataclass
class Olmo3Config(Olmo2Config):
    # RoPE settings of each layer type ("sliding_attention", "full_attention").
    rope_by_layer_type: dict[str, RopeConfig] = field(default_factory=dict)

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        fields.update(rope_by_layer_type_fields(hf_config, fields["layer_types"]))
        return fields


class Olmo3Model(RotaryByLayerType, Olmo2Model):
    def __init__(self, config: Olmo3Config) -> None:
        super().__init__(config)
        self.make_rotary_by_layer_type(config)


class Olmo3ForCausalLM(Olmo2ForCausalLM):
    """OLMo 3's causal LM: the Llama head over :class:`Olmo3Model`."""

    config_class = Olmo3Config
    model_class = Olmo3Model


MODEL_TYPES = {"olmo3": Olmo3ForCausalLM}
