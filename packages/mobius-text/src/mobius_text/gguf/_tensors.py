"""GGUF tensors as the HF checkpoint's: names, and the layout changes llama.cpp's converter made.

Per architecture the converter renames (``blk.N.attn_q.weight``), and for some
families also:

- permutes the rows of the query and key projections (``llama`` and its subclasses:
  each head's two rotary halves interleaved);
- stores Gemma's norm weights as ``1 + w``;
- stacks the experts of a layer into one ``[experts, rows, cols]`` tensor;
- reorders Falcon's fused ``query_key_value`` as all queries, then keys, then values;
- squeezes Mamba's conv weight to ``[channels, kernel]`` and stores ``A = -exp(A_log)``;
- splits DeepSeek-2's ``kv_b_proj`` into ``k_b`` (transposed) and ``v_b`` per head;
- drops the leading 1 of Qwen2-MoE's ``shared_expert_gate``.

:func:`tensor_specs` undoes each, naming every tensor as the family's HF checkpoint
names it (mobius-text's model files read those names). The facts are the
converter's (``convert_hf_to_gguf.py``), llama.cpp's tensor names (the ``gguf``
package's ``constants.py``) and transformers' GGUF loader.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

from mobius.errors import CheckpointError
from mobius.weights import GGUFFile, GGUFTensor
from mobius_text.gguf._config import GEMMA, PERMUTED_QK


class TensorSpec(NamedTuple):
    """How one HF tensor is read from the file.

    ``tensor`` holds the data (a slice of a stored tensor, for an expert or a fused
    part); HF row ``i`` is stored row ``rows[i]``; ``norm_offset`` is subtracted
    (Gemma's ``1 +``). ``shape`` and ``transform`` are set where the converter changed
    the values or their shape: the decoded array goes through ``transform``.
    """

    name: str
    tensor: GGUFTensor
    rows: np.ndarray | None = None
    norm_offset: float = 0.0
    shape: tuple[int, ...] | None = None
    transform: Callable[[np.ndarray], np.ndarray] | None = None


# Whole-model tensors: GGUF stem -> HF stem, per family layout.
_GLOBALS = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_ARCH_GLOBALS = {
    "phi2": {"output_norm": "model.final_layernorm"},
    "falcon": {"token_embd": "transformer.word_embeddings", "output_norm": "transformer.ln_f"},
    "mamba": {"token_embd": "backbone.embeddings", "output_norm": "backbone.norm_f"},
}
_LAYER_PREFIX = {"falcon": "transformer.h.{}.", "mamba": "backbone.layers.{}."}

# Per-layer tensors: GGUF stem -> HF stem (or "stem.kind" -> full HF suffix).
_LAYER = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_qkv": "self_attn.qkv_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "ffn_gate_inp": "mlp.gate",
}
_POST_NORMS = {
    "post_attention_norm": "post_attention_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
_GEMMA2_LAYER = {"ffn_norm": "pre_feedforward_layernorm", **_POST_NORMS}
_ARCH_LAYER: dict[str, dict[str, str]] = {
    "llama": {"ffn_gate_inp": "block_sparse_moe.gate"},  # Mixtral
    "gemma2": _GEMMA2_LAYER,
    "gemma3": _GEMMA2_LAYER,
    "olmo2": _POST_NORMS,
    "phi2": {"attn_output": "self_attn.dense", "ffn_up": "mlp.fc1", "ffn_down": "mlp.fc2"},
    "phi3": {"ffn_up": "mlp.gate_up_proj"},
    "starcoder2": {"ffn_up": "mlp.c_fc", "ffn_down": "mlp.c_proj"},
    "qwen2moe": {
        "ffn_gate_inp_shexp": "mlp.shared_expert_gate",
        "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
        "ffn_up_shexp": "mlp.shared_expert.up_proj",
        "ffn_down_shexp": "mlp.shared_expert.down_proj",
    },
    "deepseek2": {
        "attn_q": "self_attn.q_proj",
        "attn_q_a": "self_attn.q_a_proj",
        "attn_q_a_norm": "self_attn.q_a_layernorm",
        "attn_q_b": "self_attn.q_b_proj",
        "attn_kv_a_mqa": "self_attn.kv_a_proj_with_mqa",
        "attn_kv_a_norm": "self_attn.kv_a_layernorm",
        "attn_kv_b": "self_attn.kv_b_proj",
        "ffn_gate_shexp": "mlp.shared_experts.gate_proj",
        "ffn_up_shexp": "mlp.shared_experts.up_proj",
        "ffn_down_shexp": "mlp.shared_experts.down_proj",
        "exp_probs_b.bias": "mlp.gate.e_score_correction_bias",
    },
    "falcon": {
        "attn_norm_2": "ln_attn",
        "attn_qkv": "self_attention.query_key_value",
        "attn_output": "self_attention.dense",
        "ffn_up": "mlp.dense_h_to_4h",
        "ffn_down": "mlp.dense_4h_to_h",
    },
    "mamba": {
        "attn_norm": "norm",
        "ssm_in": "mixer.in_proj",
        "ssm_conv1d": "mixer.conv1d",
        "ssm_x": "mixer.x_proj",
        "ssm_dt": "mixer.dt_proj",
        "ssm_a": "mixer.A_log",
        "ssm_d": "mixer.D",
        "ssm_out": "mixer.out_proj",
    },
}
_ARCH_LAYER["qwen3moe"] = {}

# Stacked experts: GGUF stem -> the HF stem of expert {} (one tensor per expert).
_EXPERTS = {
    "ffn_gate_exps": "mlp.experts.{}.gate_proj",
    "ffn_up_exps": "mlp.experts.{}.up_proj",
    "ffn_down_exps": "mlp.experts.{}.down_proj",
}
_ARCH_EXPERTS = {
    "llama": {  # Mixtral's w1 (gate), w2 (down), w3 (up)
        "ffn_gate_exps": "block_sparse_moe.experts.{}.w1",
        "ffn_down_exps": "block_sparse_moe.experts.{}.w2",
        "ffn_up_exps": "block_sparse_moe.experts.{}.w3",
    },
}

# Tensors the converter adds that are not checkpoint tensors (rotary scaling is in the config).
_SKIPPED = ("rope_factors_", "rope_freqs")
_LAYER_NAME = re.compile(r"blk\.(\d+)\.(\w+?)(?:\.(weight|bias))?")


def tensor_specs(file: GGUFFile, arch: str, config: dict[str, Any]) -> Iterator[TensorSpec]:
    """Every tensor of the file as the HF checkpoint's, in file order.

    A tensor with no HF counterpart keeps its GGUF name, so that a strict apply
    reports it by name.
    """
    for gguf_name, tensor in file.tensors.items():
        if gguf_name.startswith(_SKIPPED):
            continue
        yield from _specs(file, arch, config, gguf_name, tensor)


def _specs(file, arch, config, gguf_name: str, tensor: GGUFTensor) -> Iterator[TensorSpec]:
    stem, _, kind = gguf_name.partition(".")
    if stem in _GLOBALS:
        hf = {**_GLOBALS, **_ARCH_GLOBALS.get(arch, {})}[stem]
        yield _spec(file, arch, f"{hf}.{kind}" if kind else hf, gguf_name, tensor, config)
        return
    m = _LAYER_NAME.fullmatch(gguf_name)
    if m is None:
        yield TensorSpec(gguf_name, tensor)
        return
    layer, part, kind = m.groups()
    prefix = _LAYER_PREFIX.get(arch, "model.layers.{}.").format(layer)
    special = _SPECIAL.get((arch, part))
    if special is not None:
        yield from special(file, config, prefix, layer, kind, tensor)
        return
    experts = {**_EXPERTS, **_ARCH_EXPERTS.get(arch, {})}
    if part in experts and kind == "weight":
        for e in range(tensor.shape[0]):
            yield TensorSpec(f"{prefix}{experts[part].format(e)}.weight", tensor.item(e))
        return
    names = {**_LAYER, **_ARCH_LAYER.get(arch, {})}
    full = names.get(f"{part}.{kind}")
    if full is not None:
        yield TensorSpec(prefix + full, tensor)
    elif part in names:
        suffix = f".{kind}" if kind else ""
        yield _spec(file, arch, f"{prefix}{names[part]}{suffix}", gguf_name, tensor, config)
    else:
        yield TensorSpec(gguf_name, tensor)


def _spec(file, arch, name, gguf_name, tensor, config) -> TensorSpec:
    """A renamed tensor, with Gemma's norm offset or llama's Q/K rows undone."""
    offset = 1.0 if arch in GEMMA and gguf_name.endswith("norm.weight") else 0.0
    rows = None
    if arch in PERMUTED_QK and re.search(r"\.attn_[qk]\.", gguf_name):
        key = "num_attention_heads" if ".attn_q." in gguf_name else "num_key_value_heads"
        rows = _qk_row_order(f"{file.path}: {gguf_name}", tensor.shape[0], config[key])
    return TensorSpec(name, tensor, rows=rows, norm_offset=offset)


def _qk_row_order(what: str, rows: int, heads: int) -> np.ndarray:
    """HF row ``i`` of a llama Q/K projection is GGUF row ``order[i]``.

    The converter maps each head's rows ``[half0 | half1]`` to interleaved pairs
    ``(half0[j], half1[j])``; this is transformers' ``_reverse_permute_weights``.
    """
    if heads <= 0 or rows % (2 * heads):
        raise CheckpointError(
            f"{what} has {rows} rows, not a whole number of rotary pairs for {heads} heads"
        )
    return np.arange(rows).reshape(heads, rows // heads // 2, 2).swapaxes(1, 2).reshape(-1)


# -- the converter's other changes, per (architecture, GGUF stem) ----------------------


def _phi2_qkv(file, config, prefix, layer, kind, tensor) -> Iterator[TensorSpec]:
    """Phi-2 files converted from the old checkpoint format fuse q, k and v (``Wqkv``)."""
    head_dim = config["head_dim"]
    sizes = [
        config["num_attention_heads"] * head_dim,
        config["num_key_value_heads"] * head_dim,
        config["num_key_value_heads"] * head_dim,
    ]
    if sum(sizes) != tensor.shape[0]:
        raise CheckpointError(f"{file.path}: {tensor.name} has {tensor.shape[0]} rows, not {sizes}")
    start = 0
    for proj, size in zip(("q_proj", "k_proj", "v_proj"), sizes, strict=True):
        yield TensorSpec(f"{prefix}self_attn.{proj}.{kind}", tensor.rows(start, start + size))
        start += size


def _falcon_qkv_order(heads: int, kv_heads: int, head_dim: int) -> np.ndarray:
    """HF row ``i`` of Falcon's ``query_key_value`` is GGUF row ``order[i]``.

    HF groups rows per KV head: its queries, then its key, then its value; the
    converter stores all queries, then all keys, then all values.
    """
    group = heads // kv_heads
    q = np.arange(heads * head_dim).reshape(kv_heads, group * head_dim)
    k = heads * head_dim + np.arange(kv_heads * head_dim).reshape(kv_heads, head_dim)
    v = k + kv_heads * head_dim
    return np.concatenate([q, k, v], axis=1).reshape(-1)


def _falcon_qkv(file, config, prefix, layer, kind, tensor) -> Iterator[TensorSpec]:
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config["hidden_size"] // heads
    if heads % kv_heads or tensor.shape[0] != (heads + 2 * kv_heads) * head_dim:
        raise CheckpointError(f"{file.path}: {tensor.name} does not fit {heads}/{kv_heads} heads")
    rows = _falcon_qkv_order(heads, kv_heads, head_dim)
    yield TensorSpec(f"{prefix}self_attention.query_key_value.{kind}", tensor, rows=rows)


def _falcon_norm(file, config, prefix, layer, kind, tensor) -> Iterator[TensorSpec]:
    """Falcon-40B's layout has two norms, the others one.

    With two, ``attn_norm`` is HF's ``ln_mlp`` (llama.cpp feeds it to the MLP) and
    ``attn_norm_2`` is ``ln_attn`` (the converter's name map, llama.cpp's graph).
    """
    name = "ln_mlp" if config.get("num_ln_in_parallel_attn") == 2 else "input_layernorm"
    yield TensorSpec(f"{prefix}{name}.{kind}", tensor)


def _mamba_a(file, config, prefix, layer, kind, tensor) -> Iterator[TensorSpec]:
    """The converter stores ``A = -exp(A_log)``."""
    yield TensorSpec(f"{prefix}mixer.A_log", tensor, transform=lambda a: np.log(-a))


def _mamba_conv(file, config, prefix, layer, kind, tensor) -> Iterator[TensorSpec]:
    """The converter squeezes the depthwise conv weight ``[channels, 1, kernel]``."""
    if kind == "bias":
        yield TensorSpec(f"{prefix}mixer.conv1d.bias", tensor)
        return
    channels, kernel = tensor.shape[0], tensor.shape[-1]
    yield TensorSpec(
        f"{prefix}mixer.conv1d.weight",
        tensor,
        shape=(channels, 1, kernel),
        transform=lambda w: w.reshape(channels, 1, kernel),
    )


def _shared_expert_gate(file, config, prefix, layer, kind, tensor) -> Iterator[TensorSpec]:
    """Qwen2-MoE's ``shared_expert_gate`` is ``[1, hidden]``; the file may hold ``[hidden]``."""
    hidden = tensor.shape[-1]
    yield TensorSpec(
        f"{prefix}mlp.shared_expert_gate.{kind}",
        tensor,
        shape=(1, hidden),
        transform=lambda w: w.reshape(1, hidden),
    )


def _deepseek_kv_b(file, config, prefix, layer, kind, tensor) -> Iterator[TensorSpec]:
    """Rebuild ``kv_b_proj`` from ``k_b [heads, kv_lora_rank, nope]`` and ``v_b [heads, v, kv_lora_rank]``.

    HF's rows are, per head, its ``nope`` key rows then its ``v`` value rows.
    """
    v_b = file.tensors.get(f"blk.{layer}.attn_v_b.weight")
    if v_b is None or len(tensor.shape) != 3 or len(v_b.shape) != 3:
        raise CheckpointError(f"{file.path}: blk.{layer}.attn_k_b needs a 3-D attn_v_b beside it")
    heads, rank, nope = tensor.shape
    v_dim = v_b.shape[1]
    if v_b.shape != (heads, v_dim, rank):
        raise CheckpointError(f"{file.path}: blk.{layer} attn_k_b and attn_v_b do not match")

    def kv_b(k_b: np.ndarray) -> np.ndarray:
        parts = np.concatenate([k_b.transpose(0, 2, 1), v_b.numpy()], axis=1)
        return parts.reshape(heads * (nope + v_dim), rank)

    yield TensorSpec(
        f"{prefix}self_attn.kv_b_proj.weight",
        tensor,
        shape=(heads * (nope + v_dim), rank),
        transform=kv_b,
    )


def _consumed(file, config, prefix, layer, kind, tensor) -> Iterator[TensorSpec]:
    """A tensor another one's spec reads (DeepSeek-2's ``v_b``, with ``k_b``)."""
    return iter(())


_SPECIAL = {
    ("phi2", "attn_qkv"): _phi2_qkv,
    ("falcon", "attn_qkv"): _falcon_qkv,
    ("falcon", "attn_norm"): _falcon_norm,
    ("mamba", "ssm_a"): _mamba_a,
    ("mamba", "ssm_conv1d"): _mamba_conv,
    ("qwen2moe", "ffn_gate_inp_shexp"): _shared_expert_gate,
    ("deepseek2", "attn_k_b"): _deepseek_kv_b,
    ("deepseek2", "attn_v_b"): _consumed,
}
