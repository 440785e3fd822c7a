"""mobius-text: decoder-only LLMs (and, later, MoE, encoder and encoder-decoder text models).

Importing the package registers its architectures with ``mobius.registry``;
the ``mobius.plugins`` entry point does the same without an import.
"""

__version__ = "0.1.0"

PACKAGE = "mobius-text"

# model_type -> causal-LM module class ("module:Class", imported on first use).
MODELS: dict[str, str] = {
    "llama": "mobius_text.models.llama:LlamaForCausalLM",
    "mistral": "mobius_text.models.mistral:MistralForCausalLM",
    "ministral": "mobius_text.models.mistral:MistralForCausalLM",
    "qwen2": "mobius_text.models.qwen:Qwen2ForCausalLM",
    "qwen3": "mobius_text.models.qwen:Qwen3ForCausalLM",
    "smollm3": "mobius_text.models.smollm3:SmolLM3ForCausalLM",
}


def register(registry) -> None:
    """Add mobius-text's architectures to ``registry``; calling it again changes nothing."""
    for model_type, module in MODELS.items():
        registry.register(model_type, module, task="causal-lm", package=PACKAGE)


def _register_default() -> None:
    from mobius import registry

    register(registry)


_register_default()
