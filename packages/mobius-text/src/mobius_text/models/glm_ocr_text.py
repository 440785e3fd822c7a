"""The text decoder of GLM-OCR (``glm_ocr_text``): GLM-4.1V's decoder without q/k/v biases.

Everything else is ``glm4v_text``'s (GLM-4 layers, interleaved partial M-RoPE over
``[3, batch, sequence]`` positions); the head width is the config's ``head_dim`` where
it names one, as transformers' ``GlmOcrTextAttention`` reads it. The hub checkpoint
also carries a multi-token-prediction layer after the last one
(``layers.{num_hidden_layers}``), which generation does not use: it is ignored, as
transformers ignores it.

Built only as the decoder of ``glm_ocr`` (3-D positions fit no plain causal-LM
contract), so not registered on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from mobius_text.models.glm4v_text import Glm4vTextConfig, Glm4vTextForCausalLM


@dataclass
class GlmOcrTextConfig(Glm4vTextConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        return dict(super().hf_fields(hf_config), attention_bias=False)


class GlmOcrTextForCausalLM(Glm4vTextForCausalLM):
    """GLM-4.1V's decoder without q/k/v biases; built by ``glm_ocr`` (see the module docstring)."""

    config_class = GlmOcrTextConfig

    @property
    def ignored(self) -> tuple[str, ...]:
        """The multi-token-prediction layer after the last decoder layer."""
        return (*super().ignored, f"model.layers.{self.config.num_hidden_layers}.*")


MODEL_TYPES: dict = {}  # glm_ocr_text: a part of glm_ocr only
