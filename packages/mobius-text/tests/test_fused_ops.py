"""``--ep cpu|cuda`` graphs: the fused ONNX Runtime ops are really there, and compute the same.

The parity suite (test_parity.py) checks every family's ``--ep cpu`` build against
PyTorch; these tests check the structure those builds must have, so a fusion
that silently stopped applying fails here.
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest
from text_parity_cases import TINY
from transformers import AutoConfig

from mobius.testing import OnnxCausalLM, build_with_cli, make_random_model
from mobius.testing._parity import left_padded_batch

# The parity suite's tiny shapes: head_dim 16, which the kernel's fused rotary needs.
SMALL = TINY


def op_counts(path) -> collections.Counter:
    model = onnx.load(str(path), load_external_data=False)
    return collections.Counter(node.op_type for node in model.graph.node)


def gqa_nodes(path) -> list[onnx.NodeProto]:
    model = onnx.load(str(path), load_external_data=False)
    return [node for node in model.graph.node if node.op_type == "GroupQueryAttention"]


@pytest.fixture(scope="module")
def llama_builds(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("llama")
    config = AutoConfig.for_model("llama", **SMALL)
    make_random_model(config).save_pretrained(workdir / "hf")
    return {
        ep: build_with_cli(workdir / "hf", workdir / ep, "--ep", ep) / "model.onnx"
        for ep in ("default", "cpu")
    }


def test_cpu_graph_uses_fused_attention_and_skip_norms(llama_builds):
    counts = op_counts(llama_builds["cpu"])
    assert counts["GroupQueryAttention"] == 2
    assert counts["Attention"] == 0
    # Every norm after the first (which reads the embeddings) follows a residual add.
    assert counts["SkipSimplifiedLayerNormalization"] == 4
    assert counts["RotaryEmbedding"] == 0, "head_dim 16: the kernel rotates (cos/sin caches)"
    for node in gqa_nodes(llama_builds["cpu"]):
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        assert attributes["do_rotary"] == 1
        assert node.input[1] == node.input[2] == "", "q, k, v packed into one MatMul"
    model = onnx.load(str(llama_builds["cpu"]), load_external_data=False)
    for node in model.graph.node:
        if node.op_type == "SkipSimplifiedLayerNormalization":  # mean/inv_std left out
            assert node.output[1] == node.output[2] == "" and node.output[3]
    # Per layer: packed qkv, o_proj, packed gate|up (split in two), down; plus the lm_head.
    assert counts["MatMul"] == 2 * 4 + 1
    assert counts["Split"] == 2
    default = op_counts(llama_builds["default"])
    assert default["Attention"] == 2 and "GroupQueryAttention" not in default


def test_cpu_graph_equals_default_graph(llama_builds):
    """Same logits and caches through a left-padded prefill and cached decode steps."""
    default, fused = (OnnxCausalLM(llama_builds[ep]) for ep in ("default", "cpu"))
    input_ids, mask, positions = left_padded_batch([6, 3], 128)
    cache_d, cache_f = default.empty_cache(2), fused.empty_cache(2)
    real = mask.astype(bool)
    for step in range(4):
        logits_d, cache_d = default(input_ids, mask, positions, cache_d)
        logits_f, cache_f = fused(input_ids, mask, positions, cache_f)
        rows = real if step == 0 else slice(None)
        np.testing.assert_allclose(logits_f[rows], logits_d[rows], atol=1e-5)
        input_ids = logits_d[:, -1:].argmax(-1).astype(np.int64)
        positions = positions[:, -1:] + 1
        mask = np.concatenate([mask, np.ones_like(input_ids)], axis=1)
    # The kernel rotates keys by cache slot: the unpadded row's cache is HF's exactly;
    # a left-padded row's keys are rotated by a per-row offset (same attention scores).
    for name, value in cache_d.items():
        np.testing.assert_allclose(cache_f[name][0], value[0], atol=1e-5)


def test_layer_norm_family_gets_skip_layer_norm(tmp_path):
    config = AutoConfig.for_model("gpt2", n_embd=64, n_layer=2, n_head=4, vocab_size=128)
    make_random_model(config).save_pretrained(tmp_path / "hf")
    counts = op_counts(
        build_with_cli(tmp_path / "hf", tmp_path / "cpu", "--ep", "cpu") / "model.onnx"
    )
    # Token + position embeddings feed the first norm too: 2 per layer + final norm.
    assert counts["SkipLayerNormalization"] == 5
    assert counts["GroupQueryAttention"] == 2


def test_cuda_fp16_graph(llama_builds, tmp_path):
    """``--ep cuda --dtype f16``: fused ops in half precision (run here on the CPU kernels)."""
    hf_dir = llama_builds["cpu"].parent.parent / "hf"
    path = build_with_cli(hf_dir, tmp_path / "cuda", "--ep", "cuda", "--dtype", "f16")
    counts = op_counts(path / "model.onnx")
    assert counts["GroupQueryAttention"] == 2 and counts["SkipSimplifiedLayerNormalization"] == 4
    fp16, fp32 = OnnxCausalLM(path / "model.onnx"), OnnxCausalLM(llama_builds["default"])
    input_ids, mask, positions = left_padded_batch([5], 128)
    half, _ = fp16(input_ids, mask, positions, fp16.empty_cache(1))
    full, _ = fp32(input_ids, mask, positions, fp32.empty_cache(1))
    assert half.dtype == np.float16
    # fp16 weights and activations against fp32: measured 1.2e-3 max abs on logits of
    # magnitude ~1 (fp16's 2^-11 relative step through two layers); 4x margin.
    np.testing.assert_allclose(half.astype(np.float32), full, atol=5e-3)


@pytest.mark.parametrize(
    ("model_type", "overrides"),
    [
        ("gemma2", dict(head_dim=16, attn_logit_softcapping=50.0)),  # softcap attribute
        ("gpt_oss", dict(head_dim=16, num_local_experts=4, num_experts_per_tok=2)),  # head_sink
        ("qwen3", dict(head_dim=16)),  # per-head q/k norms before the kernel's rotary
        ("phi", dict(partial_rotary_factor=0.5)),  # partial rotary, LayerNorm
    ],
)
def test_families_get_group_query_attention(model_type, overrides, tmp_path):
    config = AutoConfig.for_model(model_type, **{**SMALL, **overrides})
    config.save_pretrained(tmp_path / "hf")
    path = build_with_cli(tmp_path / "hf", tmp_path / "cpu", "--no-weights", "--ep", "cpu")
    counts = op_counts(path / "model.onnx")
    assert counts["GroupQueryAttention"] == SMALL["num_hidden_layers"]
    assert counts["Attention"] == 0
