"""Every GGUF architecture mobius maps, built from a file llama.cpp's converter would write.

Each case makes a tiny random HF model (every parameter perturbed), converts its
checkpoint as ``convert_hf_to_gguf.py`` does (:func:`convert_to_gguf`: llama.cpp's
names, metadata and tensor changes), builds the ``.gguf`` with mobius and compares
fp32 logits with the HF model in PyTorch (prefill at batch 2 with left padding, then
cached decode steps) within 1e-4. Where transformers' GGUF loader reads the
architecture, the converted file is first checked against it: its config is a part
of mobius's, and its tensors are the HF model's, so the converter kit is right
independently of mobius's reader.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from transformers import AutoConfig

import mobius
from mobius.testing import OnnxCausalLM, make_random_model
from mobius.testing._parity import compare_causal_lm
from mobius.weights import GGUFFile
from mobius_text.gguf import GGUFCheckpoint
from mobius_text.testing import convert_to_gguf, write_gguf

TINY = dict(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    pad_token_id=0,
)
EXPERTS = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
SSM = dict(
    state_size=8,
    conv_kernel=4,
    expand=2,
    intermediate_size=128,  # HF sizes the mixer as expand * hidden
    time_step_rank=8,
    layer_norm_epsilon=1e-5,
)

# case -> (HF model_type, config overrides over TINY, GGUF architecture[, converter options])
CASES = {
    "llama": ("llama", {}, "llama"),
    "mixtral": ("mixtral", dict(num_local_experts=4, num_experts_per_tok=2), "llama"),
    "qwen2": ("qwen2", {}, "qwen2"),
    "qwen2_moe": ("qwen2_moe", dict(EXPERTS, shared_expert_intermediate_size=48), "qwen2moe"),
    "qwen3": ("qwen3", dict(head_dim=32), "qwen3"),
    # llama.cpp renormalises Qwen3-MoE's top-k weights, as the real models' configs say.
    "qwen3_moe": ("qwen3_moe", dict(EXPERTS, head_dim=32, norm_topk_prob=True), "qwen3moe"),
    "gemma": ("gemma", dict(head_dim=32), "gemma"),
    # A window shorter than the prompt, so that sliding layers differ from full ones.
    "gemma2": ("gemma2", dict(head_dim=32, query_pre_attn_scalar=32, sliding_window=4), "gemma2"),
    # Six layers: five sliding (local RoPE base 10000), one full with linear RoPE scaling.
    "gemma3": (
        "gemma3_text",
        dict(
            head_dim=32,
            query_pre_attn_scalar=32,
            sliding_window=4,
            num_hidden_layers=6,
            rope_theta=1_000_000.0,
            rope_local_base_freq=10_000.0,
            rope_scaling={"rope_type": "linear", "factor": 2.0},
        ),
        "gemma3",
    ),
    # The Phi-2 converter writes a feed-forward of 4 * hidden, which Phi-2 has.
    "phi2": (
        "phi",
        dict(partial_rotary_factor=0.5, num_key_value_heads=4, intermediate_size=256),
        "phi2",
    ),
    "phi3": ("phi3", {}, "phi3"),
    "olmo2": ("olmo2", {}, "olmo2"),
    # OLMo 3 converts as olmo2 with a window: three sliding layers, then a full one.
    "olmo3": ("olmo3", dict(sliding_window=4, num_hidden_layers=4), "olmo2"),
    "starcoder2": ("starcoder2", {}, "starcoder2"),
    "granite": (
        "granite",
        dict(
            embedding_multiplier=2.0,
            residual_multiplier=0.5,
            attention_multiplier=0.1,
            logits_scaling=4.0,
        ),
        "granite",
    ),
    # Falcon-7B: one KV head, one norm; Falcon-40B: grouped KV heads, ln_attn and ln_mlp.
    "falcon-7b": ("falcon", dict(multi_query=True, new_decoder_architecture=False), "falcon"),
    "falcon-40b": ("falcon", dict(new_decoder_architecture=True, num_kv_heads=2), "falcon"),
    "mamba": ("mamba", SSM, "mamba"),
    # Falcon-Mamba converts as mamba with dt/B/C norms; llama.cpp takes their eps from the
    # model's norm eps (the HF default is 1e-6).
    "falcon_mamba": ("falcon_mamba", dict(SSM, mixer_rms_eps=1e-5), "mamba"),
    # DeepSeek-V2-Lite's layout: no query LoRA, a dense first layer, one shared expert.
    "deepseek2": (
        "deepseek_v2",
        dict(
            EXPERTS,
            n_routed_experts=4,
            n_shared_experts=1,
            first_k_dense_replace=1,
            q_lora_rank=None,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=16,
            num_key_value_heads=4,
        ),
        "deepseek2",
    ),
}
# Files from converters before May 2025: DeepSeek-2's whole kv_b_proj and true head sizes.
CASES["deepseek2-legacy"] = (*CASES["deepseek2"], {"legacy": True})
# DeepSeek-V2's YaRN (the header keeps 0.1 * mscale_all_dim; llama.cpp's graph equals HF's
# with mscale == mscale_all_dim, as the real models set them).
CASES["deepseek2-yarn"] = (
    "deepseek_v2",
    dict(
        CASES["deepseek2"][1],
        rope_scaling=dict(
            rope_type="yarn",
            factor=4.0,
            original_max_position_embeddings=32,
            beta_fast=32.0,
            beta_slow=1.0,
            mscale=0.707,
            mscale_all_dim=0.707,
        ),
    ),
    "deepseek2",
)
# The architectures transformers' GGUF loader reads (its GGUF_CONFIG_MAPPING).
TRANSFORMERS_READS = {
    "llama",
    "qwen2",
    "qwen2moe",
    "qwen3",
    "qwen3moe",
    "gemma2",
    "gemma3",
    "phi3",
    "starcoder2",
    "falcon",
    "mamba",
}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """case -> (PyTorch model, GGUF path), made on first use."""
    made = {}

    def make(case):
        if case not in made:
            model_type, overrides, arch, *options = CASES[case]
            root = tmp_path_factory.mktemp(case)
            model = make_random_model(AutoConfig.for_model(model_type, **{**TINY, **overrides}))
            model.save_pretrained(root / "hf")
            path = convert_to_gguf(root / "hf", root / f"{case}.gguf", arch, **dict(*options))
            made[case] = model, path
        return made[case]

    return make


def _check_against_transformers(model, path, unread=()) -> None:
    """transformers' GGUF loader reads the converted file as the HF model it came from.

    ``unread``: tensors it reads wrong (its loader keeps Falcon's converted
    ``query_key_value`` order, right only with one KV head).
    """
    import torch
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    reference = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=model)
    expected = {k: v for k, v in reference["config"].items() if k != "_model_name_or_path"}
    with GGUFCheckpoint.open(path) as checkpoint:
        assert {k: checkpoint.config.get(k) for k in expected} == expected
    state = model.state_dict()
    assert reference["tensors"], "transformers mapped no tensor"
    for name, tensor in reference["tensors"].items():
        if not any(part in name for part in unread):  # Gemma's 1 + w - 1 rounds: 1e-7
            torch.testing.assert_close(tensor, state[name], rtol=0, atol=1e-6, msg=name)


def _build_and_compare(model, path, out, arch) -> None:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "no tokenizer files written")  # no vocabulary here
        out = mobius.build(path).save(out, progress=False)
    options = {"decode_attention_mask": False} if arch == "mamba" else {}
    result = compare_causal_lm(model, OnnxCausalLM(out / "model.onnx"), [7, 4], 3, **options)
    result.assert_close()
    # The package describes the model it holds, as transformers reads it.
    assert AutoConfig.from_pretrained(out).model_type == model.config.model_type


@pytest.mark.parametrize("case", sorted(CASES))
def test_gguf_build_matches_pytorch(case, converted, tmp_path):
    model, path = converted(case)
    arch = CASES[case][2]
    if arch in TRANSFORMERS_READS and model.config.model_type in ("mixtral", "falcon_mamba"):
        pass  # variants transformers reads as their base family
    elif arch in TRANSFORMERS_READS:
        unread = ("query_key_value",) if case == "falcon-40b" else ()
        _check_against_transformers(model, path, unread)
    _build_and_compare(model, path, tmp_path / "onnx", arch)


def test_phi2_fused_qkv_from_old_checkpoints(converted, tmp_path):
    """Phi-2 files converted from the first checkpoint format fuse q, k and v (``Wqkv``)."""
    model, path = converted("phi2")
    with GGUFFile.open(path) as file:
        meta = {k: v for k, v in file.metadata.items() if not k.startswith("general.")}
        tensors = {name: t.numpy() for name, t in file.tensors.items()}
    for layer in range(2):
        for kind in ("weight", "bias"):
            parts = [tensors.pop(f"blk.{layer}.attn_{p}.{kind}") for p in "qkv"]
            tensors[f"blk.{layer}.attn_qkv.{kind}"] = np.concatenate(parts)
    fused = write_gguf(tmp_path / "fused.gguf", "phi2", meta, tensors)
    _build_and_compare(model, fused, tmp_path / "onnx", "phi2")


def test_stacked_experts_keep_their_blocks(tmp_path):
    """Each expert of a stacked quantized tensor is a lazy slice of the file, in its blocks."""
    import gguf

    rng = np.random.default_rng(0)
    stack = rng.standard_normal((4, 32, 64)).astype(np.float32)
    blocks = gguf.quants.quantize(stack, gguf.GGMLQuantizationType.Q8_0)
    meta = {
        "qwen3moe.block_count": 1,
        "qwen3moe.embedding_length": 64,
        "qwen3moe.attention.head_count": 4,
        "qwen3moe.expert_count": 4,
        "qwen3moe.expert_used_count": 2,
    }
    tensors = {"blk.0.ffn_up_exps.weight": (blocks, gguf.GGMLQuantizationType.Q8_0)}
    path = write_gguf(tmp_path / "experts.gguf", "qwen3moe", meta, tensors)
    expected = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType.Q8_0).reshape(stack.shape)
    with GGUFCheckpoint.open(path) as checkpoint:
        assert checkpoint.config["moe_intermediate_size"] == 32  # from the tensor's shape
        for e in range(4):
            weight = checkpoint[f"model.layers.0.mlp.experts.{e}.up_proj.weight"]
            assert weight.type_name == "Q8_0" and weight.shape == (32, 64)
            assert (
                weight.tensor.nbytes * 4
                == checkpoint.file.tensors["blk.0.ffn_up_exps.weight"].nbytes
            )
            np.testing.assert_array_equal(weight.numpy(), expected[e])
