"""Hybrid decoders in onnxruntime-genai: LFM2 (short convolutions) and Qwen3.5 (gated DeltaNet).

Their layers cache key/value or fixed-size states; ``genai_config.json`` lists each
layer's kind (``layer_types``) and names the state tensors, and the generator (0.18)
carries them from step to step in its own classes (``lfm2``, ``qwen3_5_text``,
``qwen3_5_moe_text``). Tiny random models with every parameter perturbed, built with
both attention back ends: the generator's greedy tokens must equal transformers'.
"""

from __future__ import annotations

import json
import sys

import pytest

from mobius.testing import build_with_cli, genai_greedy, make_random_model, torch_greedy

if sys.version_info < (3, 11):
    # onnxruntime-genai 0.18 needs onnxruntime >= 1.31, which ships no Python 3.10 wheels.
    pytest.skip("onnxruntime-genai needs Python >= 3.11", allow_module_level=True)

PROMPT = [1, 17, 42, 99, 5, 63, 8, 120, 33, 77]
NEW_TOKENS = 16

COMMON = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=96,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
    initializer_range=0.2,  # logits spread enough that greedy tokens do not repeat
)
DELTANET = dict(
    num_hidden_layers=3,
    layer_types=["linear_attention", "full_attention", "linear_attention"],
    head_dim=32,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=8,
    linear_value_head_dim=16,
    linear_conv_kernel_dim=4,
)
CASES = {
    "lfm2": dict(num_hidden_layers=3, layer_types=["conv", "full_attention", "conv"]),
    "qwen3_5_text": DELTANET,
    "qwen3_5_moe_text": dict(
        DELTANET,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=48,
        shared_expert_intermediate_size=96,
    ),
}
LAYER_TYPES = {
    "lfm2": ["conv", "full_attention", "conv"],
    "qwen3_5_text": DELTANET["layer_types"],
    "qwen3_5_moe_text": DELTANET["layer_types"],
}


@pytest.fixture(scope="module", params=sorted(CASES))
def hybrid(request, tmp_path_factory):
    """A saved tiny random hybrid decoder and transformers' greedy tokens for PROMPT."""
    from transformers import AutoConfig

    model_type = request.param
    config = AutoConfig.for_model(model_type, **COMMON, **CASES[model_type])
    model = make_random_model(config, seed=0)
    directory = tmp_path_factory.mktemp(model_type) / "hf"
    model.save_pretrained(directory)
    expected = torch_greedy(model, PROMPT, NEW_TOKENS, eos="suppress")
    assert len(set(expected)) > 3  # not a degenerate reference a broken state could match
    return model_type, directory, expected


@pytest.mark.parametrize(("ep", "shared"), [("cpu", True), ("default", False)])
def test_generator_carries_the_states_like_transformers(hybrid, tmp_path, ep, shared):
    model_type, source, expected = hybrid
    out = build_with_cli(source, tmp_path / "out", "--ep", ep, "--runtime", "ort-genai")

    config = json.loads((out / "genai_config.json").read_text())
    decoder = config["model"]["decoder"]
    assert config["model"]["type"] == model_type
    assert decoder["layer_types"] == LAYER_TYPES[model_type]
    assert decoder["inputs"]["past_conv_names"] == "past_key_values.%d.conv_state"
    assert decoder["outputs"]["present_conv_names"] == "present.%d.conv_state"
    has_recurrent = "linear_attention" in LAYER_TYPES[model_type]
    assert ("past_recurrent_names" in decoder["inputs"]) is has_recurrent
    # The key/value cache alone decides whether past and present share one buffer.
    assert config["search"]["past_present_share_buffer"] is shared

    assert genai_greedy(out, PROMPT, NEW_TOKENS) == expected


def test_hybrid_without_a_generator_class_is_refused(tmp_path, capsys):
    """Qwen3-Next has Qwen3.5's layers but no generator class: one clear error, no output."""
    from transformers import AutoConfig

    from mobius.cli import main

    AutoConfig.for_model(
        "qwen3_next", **COMMON, **dict(CASES["qwen3_5_moe_text"], decoder_sparse_step=1)
    ).save_pretrained(tmp_path / "hf")
    argv = ["build", "--model", str(tmp_path / "hf"), str(tmp_path / "out"), "--no-weights"]
    assert main([*argv, "--quiet", "--runtime", "ort-genai"]) == 1
    error = capsys.readouterr().err
    assert "layer 0 caches ['conv_state', 'ssm_state']" in error
    assert "generator class of its own" in error
    assert not (tmp_path / "out").exists()
