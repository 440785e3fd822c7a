"""Cohere2 (Command R7B / A): Cohere's parallel block with interleaved sliding-window layers.

Sliding-window layers use (interleaved) RoPE; full-attention layers use no positional
encoding at all. ``layer_types`` defaults to three sliding layers then one full.
There are no query/key norms.
"""

from __future__ import annotations

from dataclasses import dataclass

from mobius_text.models.cohere import CohereConfig, CohereForCausalLM, CohereModel


@dataclass
class Cohere2Config(CohereConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        return {**super().hf_fields(hf_config), "use_qk_norm": False}


class Cohere2Model(CohereModel):
    def layer_uses_rope(self, layer_idx: int) -> bool:
        return self.config.layer_types[layer_idx] == "sliding_attention"


class Cohere2ForCausalLM(CohereForCausalLM):
    """Cohere2's causal LM: the Cohere head over :class:`Cohere2Model`."""

    config_class = Cohere2Config
    model_class = Cohere2Model


MODEL_TYPES = {"cohere2": Cohere2ForCausalLM}
