"""mobius-text: decoder-only LLMs (and, later, MoE, encoder and encoder-decoder text models).

Importing the package registers its architectures with ``mobius.registry``;
the ``mobius.plugins`` entry point does the same without an import.
"""

__version__ = "0.1.0"

PACKAGE = "mobius-text"

# model_type -> (module class, config class), lazily imported.
MODELS: dict[str, tuple[str, str]] = {
    "llama": ("mobius_text.models.llama:LlamaForCausalLM", "mobius_text.models.llama:LlamaConfig"),
    "mistral": (
        "mobius_text.models.llama:LlamaForCausalLM",
        "mobius_text.models.llama:LlamaConfig",
    ),
    "qwen2": ("mobius_text.models.qwen:Qwen2ForCausalLM", "mobius_text.models.qwen:Qwen2Config"),
    "qwen3": ("mobius_text.models.qwen:Qwen3ForCausalLM", "mobius_text.models.llama:LlamaConfig"),
    "smollm3": (
        "mobius_text.models.smollm3:SmolLM3ForCausalLM",
        "mobius_text.models.smollm3:SmolLM3Config",
    ),
}


def register(registry) -> None:
    """Add mobius-text's architectures to ``registry``; calling it again changes nothing."""
    for model_type, (module, config) in MODELS.items():
        registry.register(model_type, module, task="causal-lm", config=config, package=PACKAGE)


def _register_default() -> None:
    from mobius import registry

    register(registry)


_register_default()
