"""GGUF files as HF checkpoints: config, names, permutations and offsets of each family.

Reference implementations are the ``gguf`` package (llama.cpp's own Python code,
used here to write files) and transformers' GGUF loader (config and HF tensors
of the real SmolLM2 file, and the configs of small files).
"""

from __future__ import annotations

from collections import Counter

import gguf
import numpy as np
import onnx_ir as ir
import pytest

from mobius.errors import ModelSourceError
from mobius.testing import run_kept_blocks
from mobius.weights import GGUFFile, checkpoint_dtype
from mobius_text.gguf import GGUFCheckpoint, gguf_config
from mobius_text.testing import smollm2_gguf, write_gguf

Q = gguf.GGMLQuantizationType
rng = np.random.default_rng(0)


# -- the real SmolLM2 file against transformers' GGUF loader -----------------------


@pytest.fixture(scope="module")
def smollm2():
    with GGUFCheckpoint.open(smollm2_gguf()) as checkpoint:
        yield checkpoint


_LLAMA_LAYER = [
    "input_layernorm",
    "post_attention_layernorm",
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
]


class _LlamaNames:
    """What transformers' GGUF loader reads of a model: its config and parameter names.

    Stands in for ``LlamaForCausalLM`` on the meta device, whose import alone takes
    longer than this whole test.
    """

    def __init__(self, layers: int) -> None:
        from types import SimpleNamespace

        self.config = SimpleNamespace(model_type="llama", num_hidden_layers=layers)
        names = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
        names += [f"model.layers.{i}.{p}.weight" for i in range(layers) for p in _LLAMA_LAYER]
        self._names = names

    def state_dict(self):
        return dict.fromkeys(self._names)

    def named_children(self):
        return []


def test_smollm2_config_and_tensors_match_transformers(smollm2):
    # transformers' GGUF loader returns torch tensors (torch is a test dependency).
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    types = Counter(t.type_name for t in smollm2.file.tensors.values())
    assert types == {"Q4_1": 210, "F32": 61, "Q8_0": 1}
    reference = load_gguf_checkpoint(
        str(smollm2_gguf()), return_tensors=True, model_to_load=_LlamaNames(30)
    )
    expected = {k: v for k, v in reference["config"].items() if k != "_model_name_or_path"}
    expected.pop("unk_token_id")  # not a config.json field mobius needs
    assert checkpoint_dtype(smollm2) == ir.DataType.FLOAT  # blocks decode to float32
    assert {k: smollm2.config.get(k) for k in expected} == expected
    assert smollm2.config["tie_word_embeddings"] is True and "lm_head.weight" not in smollm2
    tensors = reference["tensors"]
    assert set(smollm2) == set(tensors)
    for name, weight in smollm2.items():
        array = weight.numpy()
        assert array.dtype == np.float32 and array.shape == weight.shape
        np.testing.assert_array_equal(array, tensors[name].numpy(), err_msg=name)


def test_smollm2_repacked_weights_run_in_onnxruntime(smollm2):
    for name, bits in [
        ("model.layers.0.self_attn.q_proj.weight", 4),  # Q4_1, rows un-permuted
        ("model.layers.3.mlp.down_proj.weight", 4),
        ("model.embed_tokens.weight", 8),  # Q8_0, the tied lm_head
    ]:
        weight = smollm2[name]
        repacked = weight.repack()
        assert repacked.bits == bits and (repacked.n, repacked.k) == weight.shape
        dense = weight.numpy()
        np.testing.assert_allclose(repacked.dequantize(), dense.T, rtol=1e-6, atol=1e-7)
        x = rng.standard_normal((2, 3, weight.shape[1])).astype(np.float32)
        y = run_kept_blocks(matmul=weight, x=x)["y"]
        np.testing.assert_allclose(y, x @ dense.T, rtol=0, atol=1e-4)


# -- names, the llama Q/K permutation, Gemma norms, configs -----------------------

_LLAMA_META = {
    "llama.block_count": 1,
    "llama.embedding_length": 64,
    "llama.feed_forward_length": 96,
    "llama.attention.head_count": 4,
    "llama.attention.head_count_kv": 2,
    "llama.rope.dimension_count": 16,
    "llama.context_length": 128,
    "llama.attention.layer_norm_rms_epsilon": 1e-5,
    "llama.rope.freq_base": 10000.0,
}


def _llama_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """What llama.cpp's converter (``LlamaModel.permute``) does to HF Q/K rows."""
    return (
        w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    )


def test_llama_qk_rows_are_unpermuted_for_floats_and_blocks(tmp_path):
    q = rng.standard_normal((64, 64)).astype(np.float32)
    k = rng.standard_normal((32, 64)).astype(np.float32)
    k_blocks = gguf.quants.quantize(_llama_permute(k, 2), Q.Q8_0)
    tensors = {
        "blk.0.attn_q.weight": _llama_permute(q, 4),
        "blk.0.attn_k.weight": (k_blocks, Q.Q8_0),
        "token_embd.weight": np.ones((10, 64), np.float32),
    }
    path = write_gguf(tmp_path / "l.gguf", "llama", _LLAMA_META, tensors)
    with GGUFCheckpoint.open(path) as checkpoint:
        np.testing.assert_array_equal(
            checkpoint["model.layers.0.self_attn.q_proj.weight"].numpy(), q
        )
        weight = checkpoint["model.layers.0.self_attn.k_proj.weight"]
        k_hf = gguf.quants.dequantize(k_blocks, Q.Q8_0)[_inverse(_llama_permute(np.arange(32), 2))]
        np.testing.assert_array_equal(weight.numpy(), k_hf)
        np.testing.assert_array_equal(weight.repack().dequantize(), k_hf.T)
        assert isinstance(weight.load(repack=False), np.ndarray)
        assert checkpoint.config["vocab_size"] == 10 and checkpoint.config["head_dim"] == 16


def _inverse(order: np.ndarray) -> np.ndarray:
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    return inverse


def test_gemma_norms_lose_their_offset_and_get_their_names(tmp_path):
    meta = {k.replace("llama.", "gemma2."): v for k, v in _LLAMA_META.items()}
    tensors = {
        "blk.0.ffn_norm.weight": np.full(64, 1.5, np.float32),
        "blk.0.post_ffw_norm.weight": np.full(64, 0.25, np.float32),
        "blk.0.attn_q.weight": np.eye(64, dtype=np.float32),
    }
    path = write_gguf(tmp_path / "g.gguf", "gemma2", meta, tensors)
    with GGUFCheckpoint.open(path) as checkpoint:
        assert checkpoint["model.layers.0.pre_feedforward_layernorm.weight"].numpy()[0] == 0.5
        assert checkpoint["model.layers.0.post_feedforward_layernorm.weight"].numpy()[0] == -0.75
        q = checkpoint["model.layers.0.self_attn.q_proj.weight"].numpy()
        np.testing.assert_array_equal(q, np.eye(64))  # not permuted: gemma uses NeoX rotary


def _llama_cpp_rope_freqs(theta, dim, factor, low, high, original) -> np.ndarray:
    """llama.cpp's converter (``LlamaModel.generate_extra_tensors``), step by step."""
    import math

    factors = []
    for freq in 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float32) / dim):
        wavelen = 2 * math.pi / freq
        if wavelen < original / high:
            factors.append(1)
        elif wavelen > original / low:
            factors.append(factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, np.float32)


@pytest.mark.parametrize("factor, high", [(32.0, 4.0), (8.0, 2.0)])
def test_llama3_rope_freqs_become_rope_scaling(tmp_path, factor, high):
    import torch  # transformers' rotary code is the reference
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    meta = _LLAMA_META | {"llama.rope.freq_base": 500000.0, "llama.rope.dimension_count": 64}
    meta |= {"llama.embedding_length": 256}  # 4 heads of 64
    freqs = _llama_cpp_rope_freqs(500000.0, 64, factor, 1.0, high, 8192)
    tensors = {"rope_freqs.weight": freqs, "token_embd.weight": np.ones((10, 256), np.float32)}
    path = write_gguf(tmp_path / "l3.gguf", "llama", meta, tensors)
    with GGUFCheckpoint.open(path) as checkpoint:
        config = checkpoint.config
        assert "rope_freqs.weight" not in checkpoint
    assert config["rope_scaling"] == {
        "rope_type": "llama3",
        "factor": factor,
        "low_freq_factor": 1.0,
        "high_freq_factor": high,
        "original_max_position_embeddings": 8192,
    }
    hf_config = transformers.AutoConfig.for_model(**config)
    inv_freq, _ = ROPE_INIT_FUNCTIONS["llama3"](hf_config, torch.device("cpu"))
    plain = 1.0 / 500000.0 ** (np.arange(0, 64, 2) / 64)
    np.testing.assert_allclose(inv_freq.numpy(), plain / freqs, rtol=1e-5)


@pytest.mark.parametrize("arch", ["qwen2", "qwen3", "gemma2", "gemma3", "phi3"])
def test_configs_match_transformers(tmp_path, arch):
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    meta = {k.replace("llama.", f"{arch}."): v for k, v in _LLAMA_META.items()}
    meta |= {f"{arch}.attention.key_length": 32, f"{arch}.attention.value_length": 32}
    meta |= {f"{arch}.attention.sliding_window": 64, "tokenizer.ggml.bos_token_id": 3}
    tensors = {"token_embd.weight": np.ones((10, 64), np.float32)}
    if arch == "phi3":
        tensors["blk.0.ffn_up.weight"] = np.ones((192, 64), np.float32)
    path = write_gguf(tmp_path / f"{arch}.gguf", arch, meta, tensors)
    with GGUFCheckpoint.open(path) as checkpoint:
        config = checkpoint.config
        if arch == "phi3":
            assert "model.layers.0.mlp.gate_up_proj.weight" in checkpoint
    expected = load_gguf_checkpoint(str(path))["config"]
    expected.pop("_model_name_or_path", None)
    assert {k: config.get(k) for k in expected} == expected
    assert config["head_dim"] == 32 and config["partial_rotary_factor"] == 0.5


def test_unsupported_architecture_is_a_clear_error(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", "rwkv6", {}, {"t": np.ones(32, np.float32)})
    with GGUFFile.open(path) as file, pytest.raises(ModelSourceError, match="'rwkv6' is not"):
        gguf_config(file)
