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

# GGUF architecture -> the HF model_type it was converted from.
ARCHITECTURES = {
    "llama": "llama",
    "mistral": "mistral",
    "qwen2": "qwen2",
    "qwen2moe": "qwen2_moe",
    "qwen3": "qwen3",
    "qwen3moe": "qwen3_moe",
    "gemma": "gemma",
    "gemma2": "gemma2",
    "gemma3": "gemma3_text",
    "phi2": "phi",
    "phi3": "phi3",
    "olmo2": "olmo2",
    "starcoder2": "starcoder2",
    "deepseek2": "deepseek_v2",
    "granite": "granite",
    "falcon": "falcon",
    "mamba": "mamba",
}
# HF model_type -> its causal-LM class (``architectures`` of config.json), variants included.
HF_CLASSES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "gemma": "GemmaForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
    "phi": "PhiForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "olmo2": "Olmo2ForCausalLM",
    "olmo3": "Olmo3ForCausalLM",
    "starcoder2": "Starcoder2ForCausalLM",
    "deepseek_v2": "DeepseekV2ForCausalLM",
    "granite": "GraniteForCausalLM",
    "falcon": "FalconForCausalLM",
    "mamba": "MambaForCausalLM",
    "falcon_mamba": "FalconMambaForCausalLM",
}
# llama.cpp's converter permutes the Q/K rows of these (LlamaModel.permute, and its subclasses).
PERMUTED_QK = ("llama", "mistral", "granite")
GEMMA = ("gemma", "gemma2", "gemma3")
# Architectures without (standard) attention heads: no head_dim or rotary fields to fill.
_NO_HEADS = ("mamba", "deepseek2")

# Metadata value kinds, each checked before use: the header is a stranger's input. A size
# or count the graph divides by or allocates with is a COUNT (at least 1); INT allows 0
# where llama.cpp reads 0 as "none" (no window, no experts).
INT, COUNT, BOOL = "int", "count", "bool"
FLOAT, POSITIVE = "float", "positive"
_EXPECTED = {COUNT: "int (at least 1)", POSITIVE: "float (above 0)"}
_MAX_INT = 1 << 31

# "{arch}.<key>" -> (HF config field, kind), read for every architecture.
_COMMON_KEYS = {
    "context_length": ("max_position_embeddings", COUNT),
    "embedding_length": ("hidden_size", COUNT),
    "feed_forward_length": ("intermediate_size", COUNT),
    "block_count": ("num_hidden_layers", COUNT),
    "vocab_size": ("vocab_size", COUNT),
    "attention.head_count": ("num_attention_heads", COUNT),
    "attention.head_count_kv": ("num_key_value_heads", COUNT),
    "attention.layer_norm_rms_epsilon": ("rms_norm_eps", POSITIVE),
    "attention.key_length": ("head_dim", COUNT),
    "attention.sliding_window": ("sliding_window", INT),
    "rope.freq_base": ("rope_theta", POSITIVE),
    "attn_logit_softcapping": ("attn_logit_softcapping", POSITIVE),
    "final_logit_softcapping": ("final_logit_softcapping", POSITIVE),
}
_QWEN_MOE_KEYS = {
    "expert_count": ("num_experts", INT),
    "expert_used_count": ("num_experts_per_tok", INT),
    "expert_feed_forward_length": ("moe_intermediate_size", COUNT),
    "expert_shared_feed_forward_length": ("shared_expert_intermediate_size", COUNT),
}
# Where an architecture differs from _COMMON_KEYS (None: a key it does not take as is).
_ARCH_KEYS = {
    "llama": {  # Mixtral is converted as llama with experts
        "expert_count": ("num_local_experts", INT),
        "expert_used_count": ("num_experts_per_tok", INT),
    },
    "qwen2moe": _QWEN_MOE_KEYS,
    "qwen3moe": _QWEN_MOE_KEYS,
    "phi2": {"attention.layer_norm_epsilon": ("layer_norm_eps", POSITIVE)},
    "starcoder2": {"attention.layer_norm_epsilon": ("norm_epsilon", POSITIVE)},
    "falcon": {
        "attention.layer_norm_epsilon": ("layer_norm_epsilon", POSITIVE),
        "feed_forward_length": ("ffn_hidden_size", COUNT),
    },
    "granite": {
        "logit_scale": ("logits_scaling", POSITIVE),  # the logits are divided by it
        "embedding_scale": ("embedding_multiplier", FLOAT),
        "residual_scale": ("residual_multiplier", FLOAT),
        "attention.scale": ("attention_multiplier", FLOAT),
    },
    "mamba": {  # no attention: the converter writes zero heads and no feed-forward
        "attention.head_count": None,
        "attention.head_count_kv": None,
        "feed_forward_length": None,
        "attention.layer_norm_rms_epsilon": ("layer_norm_epsilon", POSITIVE),
        "ssm.conv_kernel": ("conv_kernel", COUNT),
        "ssm.inner_size": ("intermediate_size", COUNT),
        "ssm.state_size": ("state_size", COUNT),
        "ssm.time_step_rank": ("time_step_rank", COUNT),
        "ssm.dt_b_c_rms": ("use_dt_b_c_norm", BOOL),
    },
    "deepseek2": {
        "attention.key_length": None,  # MLA: see _deepseek2
        "attention.q_lora_rank": ("q_lora_rank", COUNT),
        "attention.kv_lora_rank": ("kv_lora_rank", COUNT),
        "leading_dense_block_count": ("first_k_dense_replace", INT),
        "expert_count": ("n_routed_experts", INT),
        "expert_used_count": ("num_experts_per_tok", INT),
        "expert_shared_count": ("n_shared_experts", INT),
        "expert_feed_forward_length": ("moe_intermediate_size", COUNT),
        "expert_weights_scale": ("routed_scaling_factor", FLOAT),
        "expert_weights_norm": ("norm_topk_prob", BOOL),
        "expert_group_count": ("n_group", INT),
        "expert_group_used_count": ("topk_group", INT),
    },
}
_TOKEN_KEYS = {"bos": "bos_token_id", "eos": "eos_token_id", "padding": "pad_token_id"}
# The expert count's field in each family's config (Mixtral, Qwen MoE, DeepSeek-V2).
_EXPERT_COUNTS = ("num_local_experts", "num_experts", "n_routed_experts")


def architecture(file: GGUFFile) -> str:
    """The file's ``general.architecture``, refused unless mobius maps it."""
    arch = file.architecture
    if not isinstance(arch, str) or arch not in ARCHITECTURES:
        supported = ", ".join(ARCHITECTURES)
        raise ModelSourceError(
            f"{file.path}: GGUF architecture {shown(arch)} is not supported "
            f"(supported: {supported})"
        )
    return arch


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut short: a metadata value may be a long array."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _uniform(value: Any, key: str, file: GGUFFile) -> Any:
    """A per-layer list that is the same for every layer, as one value."""
    if isinstance(value, list):
        if not value or any(v != value[0] for v in value):
            raise ModelSourceError(f"{file.path}: {key} varies by layer, which mobius cannot map")
        return value[0]
    return value


def _checked(value: Any, kind: str, key: str, file: GGUFFile) -> Any:
    """``value`` as ``kind``, or a clear error: a count in range, a finite float, a bool."""
    value = _uniform(value, key, file)
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == BOOL and isinstance(value, bool):
        return value
    least = 1 if kind == COUNT else 0
    if kind in (INT, COUNT) and number and isinstance(value, int) and least <= value < _MAX_INT:
        return value
    finite = number and math.isfinite(value)
    if (kind == FLOAT and finite) or (kind == POSITIVE and finite and value > 0):
        return float(value)
    expected = _EXPECTED.get(kind, kind)
    raise ModelSourceError(
        f"{file.path}: metadata {key} = {shown(value)} is not a valid {expected}"
    )


def metadata_value(file: GGUFFile, key: str, kind: str) -> Any:
    """The checked value of metadata ``key`` (per-layer lists must be uniform), or None."""
    if key not in file.metadata:
        return None
    return _checked(file.metadata[key], kind, key, file)


def model_type(file: GGUFFile) -> str:
    """The HF model_type of the file: its architecture's, or the variant its header names."""
    arch = architecture(file)
    variant = _VARIANTS.get(arch)
    return (variant and variant(file)) or ARCHITECTURES[arch]


def gguf_config(file: GGUFFile) -> dict[str, Any]:
    """The HF-style config (``config.json`` fields) that a GGUF file's metadata describes.

    Where the header is silent, the values llama.cpp assumes are filled in, from the
    same facts it uses (layer count, sizes, which tensors exist).

    Raises:
        ModelSourceError: The architecture is not one mobius maps, a field it
            needs is missing, or a metadata value has the wrong type or range.
    """
    arch = architecture(file)
    kind = model_type(file)
    config: dict[str, Any] = {"model_type": kind, "architectures": [HF_CLASSES[kind]]}
    keys = {**_COMMON_KEYS, **_ARCH_KEYS.get(arch, {})}
    for key, entry in keys.items():
        value = None if entry is None else metadata_value(file, f"{arch}.{key}", entry[1])
        if value is not None:
            config[entry[0]] = value
    for key in ("hidden_size", "num_hidden_layers"):
        if key not in config:
            raise ModelSourceError(f"{file.path}: metadata has no value for {key}")
    _check_experts(file, arch, config)
    if arch not in _NO_HEADS:
        _attention(file, arch, config)
    _vocabulary(file, config)
    config["tie_word_embeddings"] = "output.weight" not in file.tensors
    for fill in _CONVENTIONS.get(arch, ()):
        fill(file, config)
    rope_scaling = _rope_scaling(file, arch, config)
    if rope_scaling:
        config["rope_scaling"] = rope_scaling
    return config


def _check_experts(file: GGUFFile, arch: str, config: dict[str, Any]) -> None:
    """A mixture of experts routes each token to 1 up to all of its experts."""
    count = next((config[k] for k in _EXPERT_COUNTS if config.get(k)), None)
    used = config.get("num_experts_per_tok")
    if count and used is not None and not 1 <= used <= count:
        raise ModelSourceError(
            f"{file.path}: metadata {arch}.expert_used_count = {used} is not from 1 to "
            f"{arch}.expert_count ({count})"
        )


def _attention(file: GGUFFile, arch: str, config: dict[str, Any]) -> None:
    """Head counts and sizes as llama.cpp derives them where the header is silent."""
    if "num_attention_heads" not in config:
        raise ModelSourceError(f"{file.path}: metadata has no value for num_attention_heads")
    heads, hidden = config["num_attention_heads"], config["hidden_size"]
    rotary = metadata_value(file, f"{arch}.rope.dimension_count", INT)
    if arch in PERMUTED_QK and rotary:
        # llama rotates whole heads: its rotary size is its head size (as transformers reads it).
        config.setdefault("head_dim", rotary)
    if heads == 0 or ("head_dim" not in config and hidden % heads):
        raise ModelSourceError(f"{file.path}: {heads} attention heads do not divide {hidden}")
    config.setdefault("num_key_value_heads", heads)  # llama.cpp: n_head_kv defaults to n_head
    # llama.cpp: n_embd_head_k = n_embd / n_head unless key_length says otherwise.
    config.setdefault("head_dim", hidden // heads)
    if rotary and rotary > config["head_dim"]:
        raise ModelSourceError(
            f"{file.path}: metadata {arch}.rope.dimension_count = {rotary} is larger than "
            f"the head size {config['head_dim']}"
        )
    if rotary and rotary != config["head_dim"]:
        config["partial_rotary_factor"] = rotary / config["head_dim"]
    config.setdefault("rope_theta", 10000.0)  # llama.cpp's rope_freq_base default


def _vocabulary(file: GGUFFile, config: dict[str, Any]) -> None:
    if "vocab_size" not in config:
        tokens = file.metadata.get("tokenizer.ggml.tokens")
        embed = file.tensors.get("token_embd.weight")
        if isinstance(tokens, list):
            config["vocab_size"] = len(tokens)
        elif embed is not None:
            config["vocab_size"] = embed.shape[0]
    for key, field in _TOKEN_KEYS.items():
        value = file.metadata.get(f"tokenizer.ggml.{key}_token_id")
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            config[field] = value


# -- what llama.cpp assumes, per architecture ------------------------------------------


def _swa_layers(layers: int, pattern: int) -> list[str]:
    """llama.cpp's ``set_swa_pattern(pattern)``: the last layer of each ``pattern`` is full."""
    return [
        "sliding_attention" if i % pattern < pattern - 1 else "full_attention"
        for i in range(layers)
    ]


def _gemma_query_scale(config: dict[str, Any], layers_27b: int) -> None:
    """Gemma 2/3 scale queries by ``hidden / heads`` in the 27B model, by ``head_dim`` otherwise.

    llama.cpp tells the 27B model by its layer count (gemma_pytorch's config).
    """
    if config["num_hidden_layers"] == layers_27b:
        scalar = config["hidden_size"] // config["num_attention_heads"]
    else:
        scalar = config["head_dim"]
    config["query_pre_attn_scalar"] = scalar


def _gemma2(file: GGUFFile, config: dict[str, Any]) -> None:
    """llama.cpp: window 4096, every other layer sliding, soft-caps 50 and 30, 27B = 46 layers."""
    config.setdefault("sliding_window", 4096)
    config["layer_types"] = _swa_layers(config["num_hidden_layers"], 2)
    config.setdefault("attn_logit_softcapping", 50.0)
    config.setdefault("final_logit_softcapping", 30.0)
    _gemma_query_scale(config, 46)


def _gemma3(file: GGUFFile, config: dict[str, Any]) -> None:
    """llama.cpp: with a window, five sliding layers in six, their RoPE base 10000 (unscaled);
    no attention soft-cap; the final one only if the header has it; 27B = 62 layers."""
    layers = config["num_hidden_layers"]
    if config.get("sliding_window"):
        config["layer_types"] = _swa_layers(layers, 6)
        config["rope_local_base_freq"] = 10000.0
    else:  # no window: every layer attends to the whole context
        config["sliding_window"] = None
        config["layer_types"] = ["full_attention"] * layers
    config.pop("attn_logit_softcapping", None)
    config.setdefault("final_logit_softcapping", None)
    _gemma_query_scale(config, 62)


def _expert_size(file: GGUFFile, tensor: str, axis: int) -> int | None:
    """A size read off the first layer that stores ``tensor`` (llama.cpp checks it the same way)."""
    suffix = f".{tensor}.weight"
    for name, found in file.tensors.items():
        if name.startswith("blk.") and name.endswith(suffix) and len(found.shape) > axis:
            return found.shape[axis]
    return None


def _qwen_moe(file: GGUFFile, config: dict[str, Any], normalize: bool) -> None:
    """Every layer is MoE; experts' sizes from the tensors where the header has none."""
    config["decoder_sparse_step"] = 1
    config["mlp_only_layers"] = []
    config["norm_topk_prob"] = normalize
    if "moe_intermediate_size" not in config:
        size = _expert_size(file, "ffn_gate_exps", 1) or _expert_size(file, "ffn_up_exps", 1)
        if size is not None:
            config["moe_intermediate_size"] = size


def _qwen2moe(file: GGUFFile, config: dict[str, Any]) -> None:
    """llama.cpp's qwen2moe keeps the raw top-k probabilities (no renormalisation)."""
    _qwen_moe(file, config, normalize=False)
    if "shared_expert_intermediate_size" not in config:
        size = _expert_size(file, "ffn_gate_shexp", 0)
        if size is not None:
            config["shared_expert_intermediate_size"] = size


def _qwen3moe(file: GGUFFile, config: dict[str, Any]) -> None:
    """llama.cpp's qwen3moe renormalises the top-k weights (transformers' GGUF loader agrees)."""
    _qwen_moe(file, config, normalize=True)


def _llama(file: GGUFFile, config: dict[str, Any]) -> None:
    config["attention_bias"] = "blk.0.attn_q.bias" in file.tensors
    config["mlp_bias"] = "blk.0.ffn_down.bias" in file.tensors


def _starcoder2(file: GGUFFile, config: dict[str, Any]) -> None:
    config["use_bias"] = "blk.0.attn_q.bias" in file.tensors
    config["sliding_window"] = None  # llama.cpp's starcoder2 attends to the whole context


def _olmo2(file: GGUFFile, config: dict[str, Any]) -> None:
    """With a window it is OLMo 3 (llama.cpp: three sliding layers, then a full one)."""
    if config["model_type"] == "olmo3":
        config["layer_types"] = _swa_layers(config["num_hidden_layers"], 4)
    else:
        config.pop("sliding_window", None)


def _falcon(file: GGUFFile, config: dict[str, Any]) -> None:
    """llama.cpp's Falcon: rotary, parallel attention and MLP, a second norm only in 40B's layout.

    Its converter takes the KV head count from ``num_kv_heads`` (default 1): one KV
    head is Falcon-7B's multi-query layout, more are the new decoder architecture.
    """
    kv_heads = config["num_key_value_heads"]
    two_norms = "blk.0.attn_norm_2.weight" in file.tensors
    config["num_kv_heads"] = kv_heads
    config["new_decoder_architecture"] = two_norms or kv_heads > 1
    config["multi_query"] = kv_heads == 1
    config["num_ln_in_parallel_attn"] = 2 if two_norms else 1
    config["parallel_attn"] = True
    config["alibi"] = False
    config["bias"] = "blk.0.attn_qkv.bias" in file.tensors
    config.setdefault("ffn_hidden_size", 4 * config["hidden_size"])
    config["intermediate_size"] = config["ffn_hidden_size"]
    del config["head_dim"]  # FalconConfig derives it (hidden / heads) and refuses it as a field


def _mamba(file: GGUFFile, config: dict[str, Any]) -> None:
    """HF sizes the mixer as ``expand * hidden``; Falcon-Mamba's dt/B/C norms use the model's eps."""
    inner, hidden = config.get("intermediate_size"), config["hidden_size"]
    if inner is None or hidden == 0 or inner % hidden:
        raise ModelSourceError(
            f"{file.path}: ssm.inner_size {inner} is not a multiple of hidden size {hidden}"
        )
    config["expand"] = inner // hidden
    config["use_bias"] = "blk.0.ssm_in.bias" in file.tensors
    config["use_conv_bias"] = "blk.0.ssm_conv1d.bias" in file.tensors
    if config.pop("use_dt_b_c_norm", False):
        config["mixer_rms_eps"] = config.get("layer_norm_epsilon", 1e-5)


def _deepseek2(file: GGUFFile, config: dict[str, Any]) -> None:
    """MLA sizes and DeepSeek-V2 routing as llama.cpp reads them.

    The converter stores MLA as one KV head of ``kv_lora_rank + rope`` (``key_length``)
    and the true head sizes as ``key_length_mla`` / ``value_length_mla``; files from
    before that store the head sizes as ``key_length`` / ``value_length``.
    """
    arch, heads = "deepseek2", config.get("num_attention_heads")
    if not heads:
        raise ModelSourceError(f"{file.path}: metadata has no value for num_attention_heads")
    rope = metadata_value(file, f"{arch}.rope.dimension_count", INT)
    key = metadata_value(file, f"{arch}.attention.key_length_mla", COUNT)
    value = metadata_value(file, f"{arch}.attention.value_length_mla", COUNT)
    if key is None:
        key = metadata_value(file, f"{arch}.attention.key_length", COUNT)
        value = metadata_value(file, f"{arch}.attention.value_length", COUNT)
    if rope is None or key is None or value is None or key <= rope:
        raise ModelSourceError(f"{file.path}: incomplete MLA head sizes in the metadata")
    gating = metadata_value(file, f"{arch}.expert_gating_func", INT)
    if gating not in (None, 1):  # llama.cpp: absent means softmax (DeepSeek-V2 and V2.5)
        raise ModelSourceError(
            f"{file.path}: deepseek2 expert gating function {gating} (sigmoid: DeepSeek-V3) "
            "is not supported from GGUF; softmax (1) is"
        )
    config.update(
        num_key_value_heads=heads,  # the single KV head is llama.cpp's MLA cache layout
        qk_rope_head_dim=rope,
        qk_nope_head_dim=key - rope,
        v_head_dim=value,
        rope_theta=config.get("rope_theta", 10000.0),
    )
    config.setdefault("q_lora_rank", None)  # DeepSeek-V2-Lite projects queries directly
    config.setdefault("first_k_dense_replace", 0)
    config.setdefault("n_shared_experts", 0)
    config.setdefault("routed_scaling_factor", 1.0)
    config.setdefault("norm_topk_prob", False)
    groups = config.get("n_group") or 1
    config["topk_method"] = "group_limited_greedy" if groups > 1 else "greedy"


_CONVENTIONS = {
    "llama": (_llama,),
    "granite": (_llama,),
    "gemma2": (_gemma2,),
    "gemma3": (_gemma3,),
    "qwen2moe": (_qwen2moe,),
    "qwen3moe": (_qwen3moe,),
    "starcoder2": (_starcoder2,),
    "olmo2": (_olmo2,),
    "falcon": (_falcon,),
    "mamba": (_mamba,),
    "deepseek2": (_deepseek2,),
}


def _mixtral(file: GGUFFile) -> str | None:
    count = metadata_value(file, "llama.expert_count", INT)
    return "mixtral" if count else None


def _olmo3(file: GGUFFile) -> str | None:
    window = metadata_value(file, "olmo2.attention.sliding_window", INT)
    return "olmo3" if window else None


def _falcon_mamba(file: GGUFFile) -> str | None:
    return "falcon_mamba" if metadata_value(file, "mamba.ssm.dt_b_c_rms", BOOL) else None


# llama.cpp converts several HF families to one architecture; the header tells them apart.
_VARIANTS = {"llama": _mixtral, "olmo2": _olmo3, "mamba": _falcon_mamba}


_ROPE_SCALING_TYPES = ("none", "linear", "yarn", "longrope")  # what llama.cpp accepts


def _rope_scaling(file: GGUFFile, arch: str, config: dict[str, Any]) -> dict[str, Any] | None:
    """The ``rope_scaling`` of the header (or of the tensors llama.cpp keeps it in), or None."""
    tensors = file.tensors
    original = metadata_value(file, f"{arch}.rope.scaling.original_context_length", INT)
    if "rope_factors_long.weight" in tensors:  # Phi-3 LongRoPE keeps its factors as tensors
        if "rope_factors_short.weight" not in tensors:
            raise ModelSourceError(f"{file.path}: rope_factors_long without rope_factors_short")
        scaling = {
            "rope_type": "longrope",
            "long_factor": tensors["rope_factors_long.weight"].numpy().tolist(),
            "short_factor": tensors["rope_factors_short.weight"].numpy().tolist(),
        }
        if original is not None:
            config["original_max_position_embeddings"] = original
        return scaling
    if "rope_freqs.weight" in tensors:
        return _llama3_scaling(file, tensors["rope_freqs.weight"].numpy(), config)
    kind = file.metadata.get(f"{arch}.rope.scaling.type", "none")
    if not isinstance(kind, str) or kind not in _ROPE_SCALING_TYPES:
        raise ModelSourceError(f"{file.path}: unknown rope.scaling.type {shown(kind)}")
    factor = metadata_value(file, f"{arch}.rope.scaling.factor", FLOAT)
    if factor is not None and factor < 0:
        raise ModelSourceError(f"{file.path}: rope.scaling.factor {factor} is negative")
    if kind == "none" or not factor or factor == 1.0:  # llama.cpp: no factor (or 0) is scale 1
        return None
    scaling: dict[str, Any] = {"rope_type": kind, "factor": factor}
    if kind == "yarn":
        scaling.update(_yarn(file, arch, config, original))
    elif original is not None:
        scaling["original_max_position_embeddings"] = original
    return scaling


def _yarn(file: GGUFFile, arch: str, config: dict[str, Any], original: int | None) -> dict:
    """YaRN parameters; llama.cpp's defaults (beta 32 and 1, the trained context) where silent."""
    prefix = f"{arch}.rope.scaling."
    params: dict[str, Any] = {
        "original_max_position_embeddings": original or config.get("max_position_embeddings"),
        "beta_fast": metadata_value(file, prefix + "yarn_beta_fast", FLOAT) or 32.0,
        "beta_slow": metadata_value(file, prefix + "yarn_beta_slow", FLOAT) or 1.0,
    }
    attention = metadata_value(file, prefix + "attn_factor", FLOAT)
    if attention:
        params["attention_factor"] = attention
    log_multiplier = metadata_value(file, prefix + "yarn_log_multiplier", FLOAT)
    if arch == "deepseek2" and log_multiplier:
        # The converter stores 0.1 * mscale_all_dim; llama.cpp's DeepSeek-2 graph then
        # cancels the rotary mscale, which is HF's mscale == mscale_all_dim.
        params["mscale"] = params["mscale_all_dim"] = log_multiplier / 0.1
    return params


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
