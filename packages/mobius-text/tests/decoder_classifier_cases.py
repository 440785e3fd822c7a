"""Parity cases of decoders' ``*ForSequenceClassification`` (the ``text-classification`` task).

``CASES``: case -> (model_type, config overrides over the text encoders' ``TINY`` with
3 labels and pad id 0, {"model_class": the registry key verified}); ``"whole": True``
where the overrides are the whole config (the cases made from the causal-LM kit's).
"""

from __future__ import annotations


def _case(model_type: str, key: str, **overrides) -> tuple:
    return model_type, overrides, {"model_class": f"{key}ForSequenceClassification"}


# Mixture-of-experts backbones: 4 experts, top-2.
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24)

CASES = {
    "llama": _case("llama", "Llama"),
    "qwen2": _case("qwen2", "Qwen2"),
    # a vocabulary of 12: the pad id also stands among the real tokens, and moves the
    # scored token before it, as in transformers
    "qwen2-pad-in-text": _case("qwen2", "Qwen2", vocab_size=12, pad_token_id=7),
    "qwen3": _case("qwen3", "Qwen3"),
    "mistral": _case("mistral", "Mistral", sliding_window=3),
    "gemma2": _case("gemma2", "Gemma2", sliding_window=3),
    "glm": _case("glm", "Glm", partial_rotary_factor=0.5),
    "gemma": _case("gemma", "Gemma"),
    "glm4": _case("glm4", "Glm4", partial_rotary_factor=0.5),
    "phi3": _case("phi3", "Phi3"),
    "phi": _case("phi", "Phi"),
    "olmo": _case("olmo", "Olmo"),
    "olmo2": _case("olmo2", "Olmo2"),
    "olmo3": _case("olmo3", "Olmo3", sliding_window=3),
    "helium": _case("helium", "Helium"),
    "smollm3": _case("smollm3", "SmolLM3"),
    "stablelm": _case("stablelm", "StableLm"),
    "starcoder2": _case("starcoder2", "Starcoder2", sliding_window=3),
    "exaone4": _case("exaone4", "Exaone4"),
    "seed_oss": _case("seed_oss", "SeedOss"),
    "arcee": _case("arcee", "Arcee"),
    "nemotron": _case("nemotron", "Nemotron"),
    "ministral": _case("ministral", "Ministral", sliding_window=4, head_dim=16),
    "mixtral": _case(
        "mixtral", "Mixtral", num_local_experts=4, num_experts_per_tok=2, intermediate_size=32
    ),
    "qwen2_moe": _case("qwen2_moe", "Qwen2Moe", **MOE, shared_expert_intermediate_size=48),
    "qwen3_moe": _case("qwen3_moe", "Qwen3Moe", **MOE, norm_topk_prob=True),
}


def causal_classifier_cases() -> dict[str, tuple]:
    """A case per ``*ForSequenceClassification`` built through its causal LM
    (``models/causal_backbones.py``), on its family's first causal-LM parity config."""
    from text_encoder_parity_cases import first_causal_configs

    from mobius_text.models.causal_backbones import CLASSIFIERS

    configs = first_causal_configs()
    return {
        key: (model_type, configs[model_type], {"model_class": key, "whole": True})
        for key, model_type in CLASSIFIERS.items()
    }


def all_cases() -> dict[str, tuple]:
    return {**CASES, **causal_classifier_cases()}
