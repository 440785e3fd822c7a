"""An HF checkpoint written as llama.cpp's converter would write it, for tests (test-only).

:func:`convert_to_gguf` reads an HF folder (``config.json`` and safetensors) and
writes the GGUF file ``convert_hf_to_gguf.py`` makes of it: its metadata keys per
architecture, llama.cpp's tensor names (the ``gguf`` package's own name map), and
the converter's changes to the tensors (permuted llama Q/K rows, Gemma's ``1 + w``
norms, stacked experts, Falcon's regrouped ``query_key_value``, Mamba's ``-exp(A_log)``,
DeepSeek-2's split ``kv_b_proj``...). Only what the test families need, written from
the converter's facts, independently of mobius's reader. Where the header would
hold a value llama.cpp fills by convention, the converter omits it as well.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mobius_text.testing._gguf import write_gguf

Tensors = dict[str, np.ndarray]


def convert_to_gguf(
    hf_dir: Path,
    path: Path,
    arch: str,
    metadata: dict[str, Any] | None = None,
    quantize: Callable[[str, np.ndarray], Any] | None = None,
    *,
    legacy: bool = False,
) -> Path:
    """Write the GGUF file llama.cpp's converter makes of the HF folder ``hf_dir``.

    ``arch`` is the GGUF architecture; ``metadata`` adds or overrides header entries
    (a tokenizer, a key the test wants silent: a value of None drops the key).
    ``quantize(gguf_name, array)`` may replace a tensor by ``(raw blocks, GGML type)``
    (or return the array to keep it float), as ``llama-quantize`` would.
    ``legacy``: as converters before May 2025 wrote DeepSeek-2 (a whole ``kv_b_proj``,
    the head sizes in ``key_length`` / ``value_length``).
    """
    import gguf
    from safetensors.numpy import load_file

    config = json.loads((Path(hf_dir) / "config.json").read_text())
    tensors: Tensors = {}
    for file in sorted(Path(hf_dir).glob("*.safetensors")):
        tensors.update({k: v.astype(np.float32) for k, v in load_file(file).items()})
    metadata_of, changes = _LEGACY[arch] if legacy else (_METADATA[arch], _CHANGES.get(arch, ()))
    header = {**metadata_of(arch, config), **(metadata or {})}
    header = {k: v for k, v in header.items() if v is not None}
    for change in changes:
        tensors = change(config, tensors)
    layers = config.get("num_hidden_layers") or config["n_layer"]
    model_arch = next(a for a, name in gguf.MODEL_ARCH_NAMES.items() if name == arch)
    names = gguf.get_tensor_name_map(model_arch, layers)
    out = {}
    for name, array in tensors.items():
        # A change may name a tensor itself, as the converter does for the ones it makes.
        gguf_name = name if name.startswith("blk.") else names.get_name(name, (".weight", ".bias"))
        if gguf_name is None:
            raise KeyError(f"the converter has no GGUF name for {name}")
        out[gguf_name] = np.ascontiguousarray(array)
        if quantize is not None:
            out[gguf_name] = quantize(gguf_name, out[gguf_name])
    return write_gguf(Path(path), arch, header, out)


# -- metadata, as each converter class writes it ---------------------------------------


def _base(arch: str, c: dict, eps_key: str = "attention.layer_norm_rms_epsilon") -> dict:
    """TextModel.set_gguf_parameters: sizes, heads, rope base, norm eps, head dim, experts."""
    meta = {
        f"{arch}.context_length": c.get("max_position_embeddings"),
        f"{arch}.embedding_length": c["hidden_size"],
        f"{arch}.feed_forward_length": c.get("intermediate_size"),
        f"{arch}.block_count": c["num_hidden_layers"],
        f"{arch}.attention.head_count": c["num_attention_heads"],
        f"{arch}.attention.head_count_kv": c.get("num_key_value_heads"),
        f"{arch}.rope.freq_base": _float(c.get("rope_theta") or _rope(c).get("rope_theta")),
        f"{arch}.{eps_key}": _float(
            c.get("rms_norm_eps") or c.get("layer_norm_eps") or c.get("norm_epsilon")
        ),
        f"{arch}.expert_count": c.get("num_experts") or c.get("num_local_experts"),
        f"{arch}.expert_used_count": c.get("num_experts_per_tok"),
    }
    if c.get("head_dim") is not None:
        meta[f"{arch}.attention.key_length"] = c["head_dim"]
        meta[f"{arch}.attention.value_length"] = c["head_dim"]
    return meta


def _float(value) -> float | None:
    return None if value is None else float(value)


def _rope(c: dict) -> dict:
    """transformers 5 writes ``rope_parameters`` (per layer type for Gemma 3 / OLMo 3)."""
    params = c.get("rope_parameters") or {}
    return params.get("full_attention", params)


def _llama(arch: str, c: dict) -> dict:
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return {
        **_base(arch, c),
        f"{arch}.vocab_size": c["vocab_size"],
        f"{arch}.rope.dimension_count": head_dim,
    }


def _qwen_moe(arch: str, c: dict) -> dict:
    return {
        **_base(arch, c),
        f"{arch}.expert_feed_forward_length": c["moe_intermediate_size"],
        f"{arch}.expert_shared_feed_forward_length": c.get("shared_expert_intermediate_size"),
    }


def _gemma(arch: str, c: dict) -> dict:
    """Gemma 1/2 converters write no rope base (llama.cpp's 10000 is Gemma's)."""
    meta = _base(arch, c)
    meta[f"{arch}.rope.freq_base"] = None
    if arch == "gemma2":
        meta.update(
            {
                f"{arch}.attn_logit_softcapping": _float(c.get("attn_logit_softcapping")),
                f"{arch}.final_logit_softcapping": _float(c.get("final_logit_softcapping")),
                f"{arch}.attention.sliding_window": c.get("sliding_window"),
            }
        )
    return meta


def _gemma3(arch: str, c: dict) -> dict:
    meta = {**_base(arch, c), f"{arch}.attention.sliding_window": c.get("sliding_window")}
    scaling = _rope(c)
    if scaling.get("rope_type") == "linear":
        meta[f"{arch}.rope.scaling.type"] = "linear"
        meta[f"{arch}.rope.scaling.factor"] = float(scaling["factor"])
    if c.get("final_logit_softcapping") is not None:
        meta[f"{arch}.final_logit_softcapping"] = float(c["final_logit_softcapping"])
    return meta


def _phi2(arch: str, c: dict) -> dict:
    head_dim = c["hidden_size"] // c["num_attention_heads"]
    partial = c.get("partial_rotary_factor") or _rope(c).get("partial_rotary_factor")
    meta = _base(arch, c, "attention.layer_norm_epsilon")
    meta.update(
        {
            f"{arch}.feed_forward_length": 4 * c["hidden_size"],
            f"{arch}.attention.head_count_kv": c["num_attention_heads"],
            f"{arch}.rope.dimension_count": int(partial * head_dim),
            f"{arch}.rope.freq_base": None,
        }
    )
    return meta


def _olmo2(arch: str, c: dict) -> dict:
    return {**_base(arch, c), f"{arch}.attention.sliding_window": c.get("sliding_window")}


def _starcoder2(arch: str, c: dict) -> dict:
    return _base(arch, c, "attention.layer_norm_epsilon")


def _granite(arch: str, c: dict) -> dict:
    return {
        **_llama(arch, c),
        f"{arch}.attention.scale": float(c["attention_multiplier"]),
        f"{arch}.embedding_scale": float(c["embedding_multiplier"]),
        f"{arch}.residual_scale": float(c["residual_multiplier"]),
        f"{arch}.logit_scale": float(c["logits_scaling"]),
    }


def _falcon(arch: str, c: dict) -> dict:
    kv_heads = c.get("num_kv_heads") if c.get("new_decoder_architecture") else 1
    return {
        f"{arch}.context_length": 2048,  # not in config.json, says the converter
        f"{arch}.tensor_data_layout": "jploski",
        f"{arch}.embedding_length": c["hidden_size"],
        f"{arch}.feed_forward_length": 4 * c["hidden_size"],
        f"{arch}.block_count": c["num_hidden_layers"],
        f"{arch}.attention.head_count": c["num_attention_heads"],
        f"{arch}.attention.head_count_kv": kv_heads or 1,
        f"{arch}.attention.layer_norm_epsilon": float(c["layer_norm_epsilon"]),
    }


def _mamba(arch: str, c: dict) -> dict:
    return {
        f"{arch}.context_length": 2**20,
        f"{arch}.embedding_length": c["hidden_size"],
        f"{arch}.feed_forward_length": 0,
        f"{arch}.attention.head_count": 0,
        f"{arch}.block_count": c["num_hidden_layers"],
        f"{arch}.ssm.conv_kernel": c["conv_kernel"],
        f"{arch}.ssm.inner_size": c["intermediate_size"],
        f"{arch}.ssm.state_size": c["state_size"],
        f"{arch}.ssm.time_step_rank": c["time_step_rank"],
        f"{arch}.attention.layer_norm_rms_epsilon": float(c["layer_norm_epsilon"]),
        f"{arch}.ssm.dt_b_c_rms": c.get("model_type") == "falcon_mamba",
    }


def _deepseek2(arch: str, c: dict) -> dict:
    """MLA as one KV head of ``kv_lora_rank + rope`` (the converter's MQA layout)."""
    rank, rope = c["kv_lora_rank"], c["qk_rope_head_dim"]
    meta = _base(arch, c)
    meta.update(
        {
            f"{arch}.attention.head_count_kv": 1,
            f"{arch}.vocab_size": c["vocab_size"],
            f"{arch}.leading_dense_block_count": c.get("first_k_dense_replace") or 0,
            f"{arch}.attention.q_lora_rank": c.get("q_lora_rank"),
            f"{arch}.attention.kv_lora_rank": rank,
            f"{arch}.attention.key_length": rank + rope,
            f"{arch}.attention.value_length": rank,
            f"{arch}.attention.key_length_mla": c["qk_nope_head_dim"] + rope,
            f"{arch}.attention.value_length_mla": c["v_head_dim"],
            f"{arch}.expert_feed_forward_length": c["moe_intermediate_size"],
            f"{arch}.expert_count": c["n_routed_experts"],
            f"{arch}.expert_shared_count": c.get("n_shared_experts") or 0,
            f"{arch}.expert_weights_scale": float(c.get("routed_scaling_factor", 1.0)),
            f"{arch}.rope.dimension_count": rope,
        }
    )
    scaling = _rope(c)
    if scaling.get("rope_type") == "yarn":  # DeepSeek-V2's long-context RoPE
        meta.update(
            {
                f"{arch}.rope.scaling.type": "yarn",
                f"{arch}.rope.scaling.factor": float(scaling["factor"]),
                f"{arch}.rope.scaling.original_context_length": scaling[
                    "original_max_position_embeddings"
                ],
                # 0.1 * mscale_all_dim: the converter's legacy spelling (llama.cpp undoes it).
                f"{arch}.rope.scaling.yarn_log_multiplier": 0.1 * scaling["mscale_all_dim"],
            }
        )
    return meta


_METADATA: dict[str, Callable[[str, dict], dict]] = {
    "llama": _llama,
    "qwen2": _base,
    "qwen3": _base,
    "qwen2moe": _qwen_moe,
    "qwen3moe": _qwen_moe,
    "gemma": _gemma,
    "gemma2": _gemma,
    "gemma3": _gemma3,
    "phi2": _phi2,
    "phi3": _base,
    "olmo2": _olmo2,
    "starcoder2": _starcoder2,
    "granite": _granite,
    "falcon": _falcon,
    "mamba": _mamba,
    "deepseek2": _deepseek2,
}


# -- the converter's changes to the tensors --------------------------------------------


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """LlamaModel.permute: each head's rotary halves interleaved."""
    return (
        w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    )


def _permute_qk(c: dict, t: Tensors) -> Tensors:
    heads = c["num_attention_heads"]
    kv_heads = c.get("num_key_value_heads") or heads
    for name in t:
        if ".q_proj." in name:
            t[name] = _permute(t[name], heads)
        elif ".k_proj." in name:
            t[name] = _permute(t[name], kv_heads)
    return t


def _gemma_norms(c: dict, t: Tensors) -> Tensors:
    return {k: v + 1 if k.endswith("norm.weight") else v for k, v in t.items()}


def _stack_experts(pattern: str, parts: tuple[str, ...]) -> Callable[[dict, Tensors], Tensors]:
    """One ``[experts, rows, cols]`` tensor per layer and part, under the merged HF name."""
    expert = re.compile(pattern)

    def change(c: dict, t: Tensors) -> Tensors:
        out, stacks = {}, {}
        for name, array in t.items():
            m = expert.fullmatch(name)
            if m is None:
                out[name] = array
            else:
                stacks.setdefault((m["prefix"], m["part"]), {})[int(m["e"])] = array
        for (prefix, part), experts in stacks.items():
            assert part in parts, part
            out[f"{prefix}.{part}.weight"] = np.stack([experts[e] for e in sorted(experts)])
        return out

    return change


_QWEN_EXPERTS = _stack_experts(
    r"(?P<prefix>model\.layers\.\d+\.mlp\.experts)\.(?P<e>\d+)\.(?P<part>\w+)\.weight",
    ("gate_proj", "up_proj", "down_proj"),
)
_MIXTRAL_EXPERTS = _stack_experts(
    r"(?P<prefix>model\.layers\.\d+\.block_sparse_moe\.experts)\.(?P<e>\d+)\.(?P<part>w\d)\.weight",
    ("w1", "w2", "w3"),
)


def _mixtral_names(c: dict, t: Tensors) -> Tensors:
    """The Mixtral converter names the stacked w1/w2/w3 as ffn_gate/down/up_exps itself."""
    parts = {"w1": "ffn_gate_exps", "w2": "ffn_down_exps", "w3": "ffn_up_exps"}
    out = {}
    for name, array in t.items():
        m = re.fullmatch(r"model\.layers\.(\d+)\.block_sparse_moe\.experts\.(w\d)\.weight", name)
        out[f"blk.{m[1]}.{parts[m[2]]}.weight" if m else name] = array
    return out


def _squeeze_shared_gate(c: dict, t: Tensors) -> Tensors:
    """A quantized ``shared_expert_gate`` comes out as ``[hidden]``; write it so."""
    return {
        k: v.reshape(-1) if k.endswith("shared_expert_gate.weight") else v for k, v in t.items()
    }


def _falcon_qkv(c: dict, t: Tensors) -> Tensors:
    """FalconModel.modify_tensors: per KV group (queries, key, value) -> all q, all k, all v."""
    heads = c["num_attention_heads"]
    kv_heads = (c.get("num_kv_heads") if c.get("new_decoder_architecture") else None) or 1
    head_dim = c["hidden_size"] // heads
    for name in t:
        if "query_key_value" in name:
            w = t[name]
            qkv = w.reshape(kv_heads, heads // kv_heads + 2, head_dim, *w.shape[1:])
            q = qkv[:, :-2].reshape(heads * head_dim, *w.shape[1:])
            k = qkv[:, -2].reshape(kv_heads * head_dim, *w.shape[1:])
            v = qkv[:, -1].reshape(kv_heads * head_dim, *w.shape[1:])
            t[name] = np.concatenate([q, k, v])
    return t


def _mamba_ssm(c: dict, t: Tensors) -> Tensors:
    """MambaModel.modify_tensors: ``A = -exp(A_log)``, the conv weight squeezed."""
    out = {}
    for name, array in t.items():
        if name.endswith(".A_log"):
            array = -np.exp(array)
        elif name.endswith("conv1d.weight"):
            array = array.reshape(array.shape[0], array.shape[-1])
        out[name] = array
    return out


def _mamba_names(c: dict, t: Tensors) -> Tensors:
    """``A_log`` and ``D`` have no suffix: GGUF names them ``blk.N.ssm_a`` / ``ssm_d``."""
    out = {}
    for name, array in t.items():
        m = re.fullmatch(r"backbone\.layers\.(\d+)\.mixer\.(A_log|D)", name)
        out[f"blk.{m[1]}.ssm_{'a' if m[2] == 'A_log' else 'd'}" if m else name] = array
    return out


def _deepseek_kv_b(c: dict, t: Tensors) -> Tensors:
    """DeepseekV2Model.modify_tensors: ``kv_b_proj`` as ``k_b`` (transposed) and ``v_b`` per head."""
    heads, nope, v_dim = c["num_attention_heads"], c["qk_nope_head_dim"], c["v_head_dim"]
    out = {}
    for name, array in t.items():
        if not name.endswith("kv_b_proj.weight"):
            out[name] = array
            continue
        kv_b = array.reshape(heads, nope + v_dim, array.shape[-1])
        layer = re.search(r"layers\.(\d+)\.", name)[1]
        out[f"blk.{layer}.attn_k_b.weight"] = kv_b[:, :nope].transpose(0, 2, 1)
        out[f"blk.{layer}.attn_v_b.weight"] = kv_b[:, nope:]
    return out


def _drop_tied_head(c: dict, t: Tensors) -> Tensors:
    if c.get("tie_word_embeddings", True):
        t.pop("lm_head.weight", None)
    return t


_CHANGES: dict[str, tuple[Callable[[dict, Tensors], Tensors], ...]] = {
    "llama": (_permute_qk, _MIXTRAL_EXPERTS, _mixtral_names),
    "granite": (_permute_qk,),
    "gemma": (_gemma_norms,),
    "gemma2": (_gemma_norms,),
    "gemma3": (_gemma_norms,),
    "qwen2moe": (_QWEN_EXPERTS, _squeeze_shared_gate),
    "qwen3moe": (_QWEN_EXPERTS,),
    "deepseek2": (_QWEN_EXPERTS, _deepseek_kv_b),
    "falcon": (_falcon_qkv, _drop_tied_head),
    "mamba": (_mamba_ssm, _mamba_names, _drop_tied_head),
}


def _deepseek2_legacy(arch: str, c: dict) -> dict:
    """Before MLA was stored as one KV head: the true head sizes, every KV head."""
    meta = _deepseek2(arch, c)
    meta.update(
        {
            f"{arch}.attention.head_count_kv": c["num_key_value_heads"],
            f"{arch}.attention.key_length": c["qk_nope_head_dim"] + c["qk_rope_head_dim"],
            f"{arch}.attention.value_length": c["v_head_dim"],
            f"{arch}.attention.key_length_mla": None,
            f"{arch}.attention.value_length_mla": None,
        }
    )
    return meta


_LEGACY = {"deepseek2": (_deepseek2_legacy, (_QWEN_EXPERTS,))}
