"""A K-quant mix (Q4_K, Q5_0, Q6_K, Q8_0) builds as its blocks: PyTorch's numbers, near the file's size.

Tiny random llama and gemma3 models are converted as llama.cpp's converter would,
then their weights are stored as a ``Q4_K_M``-like mix of block types (random
blocks: ``gguf`` has no K-quant quantizer, and every bit pattern is a case). The
reference is PyTorch with the weights transformers' GGUF loader dequantizes from
the same file (the ``gguf`` package's decoding, not mobius's).
"""

from __future__ import annotations

import logging
import re
import warnings

import numpy as np
import pytest
from transformers import AutoConfig

import mobius
from mobius.testing import OnnxCausalLM, make_random_model
from mobius.testing._parity import compare_causal_lm
from mobius_text.testing import convert_to_gguf, random_blocks

TINY = dict(
    vocab_size=256,
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    max_position_embeddings=64,
    pad_token_id=0,
)
CASES = {
    "llama": ("llama", {}, "llama"),
    "gemma3": (
        "gemma3_text",
        dict(query_pre_attn_scalar=64, sliding_window=4, rope_local_base_freq=10_000.0),
        "gemma3",
    ),
}
# A Q4_K_M-like plan: Q4_K by default, Q6_K for the head and half the attn_v/ffn_down
# (the first layer), a Q5_0 and the Q8_0 table (as a file quantized from a Q8_0 might).
PLAN = [
    (r"token_embd", "Q8_0"),
    (r"output\.", "Q6_K"),
    (r"blk\.0\.(attn_v|ffn_down)", "Q6_K"),
    (r"blk\.1\.attn_k\.", "Q5_0"),
    (r"", "Q4_K"),
]


def _mix(name: str, array: np.ndarray):
    if array.ndim != 2 or not name.endswith(".weight"):
        return array  # norms stay F32, as llama-quantize leaves them
    type_name = next(t for pattern, t in PLAN if re.match(pattern, name))
    # Weights within 0.25, as a trained model's are.
    return random_blocks(array.shape, type_name, seed=len(name), magnitude=0.25)


@pytest.fixture(scope="module", params=sorted(CASES))
def mixed(request, tmp_path_factory):
    """(PyTorch model with the file's dequantized weights, GGUF path, its tensor bytes)."""
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    from mobius.weights import GGUFFile

    model_type, overrides, arch = CASES[request.param]
    root = tmp_path_factory.mktemp(request.param)
    model = make_random_model(AutoConfig.for_model(model_type, **{**TINY, **overrides}))
    model.save_pretrained(root / "hf")
    path = convert_to_gguf(root / "hf", root / "mixed.gguf", arch, quantize=_mix)
    tensors = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=model)["tensors"]
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}  # tied: the table
    with GGUFFile.open(path) as file:
        types = {t.type_name for t in file.tensors.values()}
        tensor_bytes = sum(t.nbytes for t in file.tensors.values())
    assert {"Q4_K", "Q5_0", "Q6_K", "Q8_0"} <= types
    return model, path, tensor_bytes


def _build(path, out, **options):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "no tokenizer files written")  # no vocabulary here
        return mobius.build(path, **options).save(out, progress=False)


@pytest.mark.parametrize("ep", ["default", "cpu"])
def test_kept_blocks_compute_what_pytorch_computes(mixed, tmp_path, ep):
    import onnx_ir as ir

    model, path, tensor_bytes = mixed
    # --ep cpu packs q|k|v of different types (Q4_K, Q5_0, Q6_K): kept apart, concatenated.
    out = _build(path, tmp_path / "onnx", ep=ep, accuracy_level=0)
    result = compare_causal_lm(model, OnnxCausalLM(out / "model.onnx"), [7, 4], 3)
    result.assert_close()  # 1e-4 on logits, identical greedy tokens
    # Stored: the blocks (Q5_0 and Q6_K widened to 8 bits), not float copies. (The
    # graph itself, 100 KB of a tiny model's nodes, is not weights.)
    stored = sum(
        v.const_value.nbytes for v in ir.load(out / "model.onnx").graph.initializers.values()
    )
    assert stored <= 1.15 * tensor_bytes, (stored, tensor_bytes)


def test_quant_int4_keeps_the_blocks_and_requantize_warns(mixed, tmp_path, caplog):
    import onnx_ir as ir

    _, path, _ = mixed
    kept = _build(path, tmp_path / "kept")
    int4 = _build(path, tmp_path / "int4", quant="int4")
    for package in (kept, int4):
        graph = ir.load(package / "model.onnx").graph
        assert any(name.endswith(".blocks") for name in graph.initializers)
        assert not any(name.endswith(".int4") for name in graph.initializers)  # no RTN
    with caplog.at_level(logging.WARNING, logger="mobius"):
        again = _build(path, tmp_path / "again", quant="int4", requantize=True)
    warning = next(r.getMessage() for r in caplog.records if "--requantize" in r.getMessage())
    assert "model.layers.0.self_attn.q_proj.weight" in warning
    graph = ir.load(again / "model.onnx").graph
    assert not any(name.endswith(".blocks") for name in graph.initializers)
