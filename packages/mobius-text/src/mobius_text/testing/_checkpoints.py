"""A tiny Llama checkpoint written with numpy alone: for tests that must not need torch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

TINY_LLAMA_CONFIG: dict[str, Any] = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
}


def tiny_llama_shapes(num_layers: int = 2) -> dict[str, tuple[int, ...]]:
    """The HF checkpoint names and shapes of the tiny Llama."""
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (64, 32)}
    for i in range(num_layers):
        p = f"model.layers.{i}."
        shapes.update(
            {
                p + "input_layernorm.weight": (32,),
                p + "self_attn.q_proj.weight": (32, 32),
                p + "self_attn.k_proj.weight": (16, 32),
                p + "self_attn.v_proj.weight": (16, 32),
                p + "self_attn.o_proj.weight": (32, 32),
                p + "post_attention_layernorm.weight": (32,),
                p + "mlp.gate_proj.weight": (64, 32),
                p + "mlp.up_proj.weight": (64, 32),
                p + "mlp.down_proj.weight": (32, 64),
            }
        )
    shapes["model.norm.weight"] = (32,)
    shapes["lm_head.weight"] = (64, 32)
    return shapes


def tiny_llama_tensors(seed: int = 0, dtype: Any = np.float32) -> dict[str, np.ndarray]:
    """Seeded random weights; norm weights stay near 1 so activations keep a sane scale."""
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, shape in tiny_llama_shapes().items():
        if name.endswith("norm.weight"):
            array = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            array = 0.2 * rng.standard_normal(shape)
        tensors[name] = array.astype(np.float32).astype(dtype)
    return tensors


def write_tiny_llama(
    directory: Path,
    tensors: dict[str, np.ndarray] | None = None,
    **config: Any,
) -> Path:
    """Write ``config.json`` and ``model.safetensors`` of the tiny Llama into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({**TINY_LLAMA_CONFIG, **config}, indent=2))
    save_file(tiny_llama_tensors() if tensors is None else tensors, directory / "model.safetensors")
    return directory
