"""Gemma 4 unified (text): the Gemma 4 dense decoder without per-layer inputs or MoE.

transformers' ``Gemma4UnifiedTextModel`` is Gemma 4's text stack (the same attention,
proportional RoPE, KV sharing, sandwich norms and ``layer_scalar``) with the per-layer
input embeddings and the MoE block removed: its config raises on those fields rather
than holding zeros, so they are read here as absent.

``use_bidirectional_attention="vision"`` (the config's default) changes nothing for
text alone: transformers' causal LM masks causally; only the multimodal wrapper
(mobius-vision's ``gemma4_unified``) lets image tokens attend both ways.
"""

from __future__ import annotations

from typing import Any

from mobius.errors import ConfigError
from mobius_text.models.gemma4_text import Gemma4ForCausalLM, Gemma4TextConfig

#: What Gemma 4's config reader finds in a unified config, whose fields for these raise.
_ABSENT = {
    "vocab_size_per_layer_input": 0,
    "hidden_size_per_layer_input": 0,
    "enable_moe_block": False,
    "use_bidirectional_attention": None,
}


class _UnifiedAsGemma4:
    """A unified text config read as a Gemma 4 text config (see ``_ABSENT``)."""

    def __init__(self, hf_config: Any) -> None:
        object.__setattr__(self, "_hf_config", hf_config)

    def __getattr__(self, name: str) -> Any:
        if name in _ABSENT:
            return _ABSENT[name]
        return getattr(self._hf_config, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._hf_config, name, value)


class Gemma4UnifiedTextConfig(Gemma4TextConfig):
    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if getattr(hf_config, "use_bidirectional_attention", None) == "all":
            raise ConfigError(
                f"{hf_config.model_type}: use_bidirectional_attention='all' makes an encoder "
                "(every token sees every other), not a causal LM"
            )
        return super().hf_fields(_UnifiedAsGemma4(hf_config))


class Gemma4UnifiedForCausalLM(Gemma4ForCausalLM):
    """Gemma 4's text causal LM, read from a unified config (module docstring)."""

    config_class = Gemma4UnifiedTextConfig


MODEL_TYPES = {"gemma4_unified_text": Gemma4UnifiedForCausalLM}
