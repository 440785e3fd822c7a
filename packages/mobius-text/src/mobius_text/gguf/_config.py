"""GGUF metadata as a HuggingFace config: the ``config.json`` fields of the converted model.

The keys are llama.cpp's (``{arch}.embedding_length``...), as its converter writes
them and transformers' GGUF loader reads them. Rotary scaling that llama.cpp keeps
as tensors (Phi-3's LongRoPE factors, Llama 3's ``rope_freqs``) is turned back into
the config's ``rope_scaling``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mobius.errors import ModelSourceError
from mobius.weights import GGUFFile

# GGUF architecture -> (HF model_type, HF class).
ARCHITECTURES = {
    "llama": ("llama", "LlamaForCausalLM"),
    "mistral": ("mistral", "MistralForCausalLM"),
    "qwen2": ("qwen2", "Qwen2ForCausalLM"),
    "qwen3": ("qwen3", "Qwen3ForCausalLM"),
    "gemma": ("gemma", "GemmaForCausalLM"),
    "gemma2": ("gemma2", "Gemma2ForCausalLM"),
    "gemma3": ("gemma3_text", "Gemma3ForCausalLM"),
    "phi3": ("phi3", "Phi3ForCausalLM"),
}
PERMUTED_QK = ("llama", "mistral")  # the converter's permute() runs for these only
GEMMA = ("gemma", "gemma2", "gemma3")

# "{arch}.<key>" -> HF config field.
_ARCH_KEYS = {
    "context_length": "max_position_embeddings",
    "embedding_length": "hidden_size",
    "feed_forward_length": "intermediate_size",
    "block_count": "num_hidden_layers",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "attention.key_length": "head_dim",
    "attention.sliding_window": "sliding_window",
    "rope.freq_base": "rope_theta",
    "vocab_size": "vocab_size",
    "attn_logit_softcapping": "attn_logit_softcapping",
    "final_logit_softcapping": "final_logit_softcapping",
}
_TOKEN_KEYS = {"bos": "bos_token_id", "eos": "eos_token_id", "padding": "pad_token_id"}


def architecture(file: GGUFFile) -> str:
    arch = file.architecture
    if arch not in ARCHITECTURES:
        supported = ", ".join(ARCHITECTURES)
        raise ModelSourceError(
            f"{file.path}: GGUF architecture {arch!r} is not supported (supported: {supported})"
        )
    return arch


def _uniform(value: Any, key: str, file: GGUFFile) -> Any:
    """A per-layer list that is the same for every layer, as one value."""
    if isinstance(value, list):
        if not value or any(v != value[0] for v in value):
            raise ModelSourceError(f"{file.path}: {key} varies by layer, which mobius cannot map")
        return value[0]
    return value


def gguf_config(file: GGUFFile) -> dict[str, Any]:
    """The HF-style config (``config.json`` fields) that a GGUF file's metadata describes.

    Raises:
        ModelSourceError: The architecture is not one mobius maps, or a field it
            needs is missing.
    """
    arch, meta = architecture(file), file.metadata
    model_type, hf_class = ARCHITECTURES[arch]
    config: dict[str, Any] = {"model_type": model_type, "architectures": [hf_class]}
    for key, field in _ARCH_KEYS.items():
        if f"{arch}.{key}" in meta:
            config[field] = _uniform(meta[f"{arch}.{key}"], f"{arch}.{key}", file)
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads"):
        if key not in config:
            raise ModelSourceError(f"{file.path}: metadata has no value for {key}")
    config.setdefault("num_key_value_heads", config["num_attention_heads"])
    rotary = meta.get(f"{arch}.rope.dimension_count")
    if arch in PERMUTED_QK and isinstance(rotary, int):
        config.setdefault(
            "head_dim", rotary
        )  # llama rotates whole heads (as transformers reads it)
    head_dim = config.get("head_dim", config["hidden_size"] // config["num_attention_heads"])
    if isinstance(rotary, int) and rotary != head_dim:
        config["partial_rotary_factor"] = rotary / head_dim
    if "vocab_size" not in config:
        tokens = meta.get("tokenizer.ggml.tokens")
        embed = file.tensors.get("token_embd.weight")
        if isinstance(tokens, list):
            config["vocab_size"] = len(tokens)
        elif embed is not None:
            config["vocab_size"] = embed.shape[0]
    config["tie_word_embeddings"] = "output.weight" not in file.tensors
    if arch == "llama":
        config["attention_bias"] = "blk.0.attn_q.bias" in file.tensors
        config["mlp_bias"] = "blk.0.ffn_down.bias" in file.tensors
    for key, field in _TOKEN_KEYS.items():
        if isinstance(meta.get(f"tokenizer.ggml.{key}_token_id"), int):
            config[field] = meta[f"tokenizer.ggml.{key}_token_id"]
    rope_scaling = _rope_scaling(file, arch, config)
    if rope_scaling:
        config["rope_scaling"] = rope_scaling
    return config


def _rope_scaling(file: GGUFFile, arch: str, config: dict[str, Any]) -> dict[str, Any] | None:
    meta, tensors = file.metadata, file.tensors
    kind = meta.get(f"{arch}.rope.scaling.type")
    original = meta.get(f"{arch}.rope.scaling.original_context_length")
    if "rope_factors_long.weight" in tensors:  # Phi-3 LongRoPE keeps its factors as tensors
        if "rope_factors_short.weight" not in tensors:
            raise ModelSourceError(f"{file.path}: rope_factors_long without rope_factors_short")
        scaling = {
            "rope_type": "longrope",
            "long_factor": tensors["rope_factors_long.weight"].numpy().tolist(),
            "short_factor": tensors["rope_factors_short.weight"].numpy().tolist(),
        }
        if isinstance(original, int):
            config["original_max_position_embeddings"] = original
        return scaling
    if "rope_freqs.weight" in tensors:
        return _llama3_scaling(file, tensors["rope_freqs.weight"].numpy(), config)
    if kind in (None, "none"):
        return None
    scaling = {"rope_type": kind, "factor": meta.get(f"{arch}.rope.scaling.factor", 1.0)}
    if isinstance(original, int):
        scaling["original_max_position_embeddings"] = original
    return scaling


def _llama3_factors(inv_freq: np.ndarray, factor, low, high, original) -> np.ndarray:
    """The per-frequency divisors llama.cpp's converter stores for Llama 3 rotary scaling."""
    wavelen = 2 * math.pi / inv_freq
    smooth = (original / wavelen - low) / (high - low)
    with np.errstate(divide="ignore"):
        factors = 1 / ((1 - smooth) / factor + smooth)
    factors = np.where(wavelen < original / high, 1.0, factors)
    return np.where(wavelen > original / low, factor, factors)


def _llama3_scaling(file: GGUFFile, factors: np.ndarray, config: dict[str, Any]) -> dict:
    """Recover ``rope_type: llama3`` parameters from the ``rope_freqs`` tensor.

    The tensor holds, per rotary frequency, 1 (high), ``factor`` (low) or a smooth
    blend. ``factor`` is its maximum; the blend is linear in ``1 / wavelength`` and
    gives the band edges, taking ``low_freq_factor`` 1 as every Llama 3 does. Any
    guess is checked by recomputing the whole tensor.
    """
    head_dim = config.get("head_dim", config["hidden_size"] // config["num_attention_heads"])
    rotary = round(head_dim * config.get("partial_rotary_factor", 1.0))
    theta = float(config.get("rope_theta", 10000.0))
    inv_freq = 1.0 / theta ** (np.arange(0, rotary, 2, dtype=np.float64) / rotary)
    factors = factors.astype(np.float64).reshape(-1)
    if factors.shape != inv_freq.shape:
        raise ModelSourceError(
            f"{file.path}: rope_freqs has {factors.size} values, expected {inv_freq.size}"
        )
    factor = float(factors.max())
    guesses = [(1.0, 4.0, 8192)]  # Llama 3.1 and 3.2
    medium = (factors > 1 + 1e-6) & (factors < factor * (1 - 1e-6))
    if medium.sum() >= 2 and factor > 1:
        smooth = (1 / factors[medium] - 1 / factor) / (1 - 1 / factor)
        slope, intercept = np.polyfit(inv_freq[medium] / (2 * math.pi), smooth, 1)
        if intercept < 0:
            high = 1 - 1 / intercept
            guesses.insert(0, (1.0, round(high, 6), round(-slope / intercept)))
    for low, high, original in guesses:
        if np.allclose(_llama3_factors(inv_freq, factor, low, high, original), factors, rtol=1e-4):
            return {
                "rope_type": "llama3",
                "factor": factor,
                "low_freq_factor": low,
                "high_freq_factor": high,
                "original_max_position_embeddings": int(original),
            }
    raise ModelSourceError(f"{file.path}: rope_freqs is not Llama 3 rotary scaling")
