"""``mobius build --runtime ort-genai``: onnxruntime-genai's own generator runs the package.

A tiny random llama is built with both attention back ends (``--ep cpu``:
GroupQueryAttention, run with one shared past/present buffer; ``--ep default``: the
ONNX Attention op, separate buffers) and SmolLM2-135M-Instruct with ``--ep cpu``; the
generator's greedy tokens must equal transformers' ``generate``.
"""

from __future__ import annotations

import json
import sys

import pytest

from mobius.testing import build_with_cli, genai_greedy, make_random_model, torch_greedy

if sys.version_info < (3, 11):
    # Not a dev dependency there: onnxruntime-genai 0.18 needs onnxruntime >= 1.31,
    # which ships no Python 3.10 wheels.
    pytest.skip("onnxruntime-genai needs Python >= 3.11", allow_module_level=True)

import onnxruntime_genai as og  # noqa: E402

PROMPT = [1, 17, 42, 99, 5, 63, 8, 120, 33, 77]
NEW_TOKENS = 16

TINY_LLAMA = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=128,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
    bos_token_id=1,
    eos_token_id=2,
)


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    """A saved tiny random llama (every parameter perturbed) and its PyTorch model."""
    from transformers import LlamaConfig

    model = make_random_model(LlamaConfig(**TINY_LLAMA), seed=0)
    directory = tmp_path_factory.mktemp("tiny-llama") / "hf"
    model.save_pretrained(directory)
    return directory, model


@pytest.mark.parametrize(("ep", "shared"), [("cpu", True), ("default", False)])
def test_tiny_llama_generates_like_transformers(tiny_llama, tmp_path, ep, shared):
    source, model = tiny_llama
    out = build_with_cli(source, tmp_path / "out", "--ep", ep, "--runtime", "ort-genai")

    config = json.loads((out / "genai_config.json").read_text())
    decoder = config["model"]["decoder"]
    assert config["model"]["type"] == "llama"
    assert (decoder["head_size"], decoder["num_key_value_heads"]) == (16, 2)
    assert (decoder["num_attention_heads"], decoder["num_hidden_layers"]) == (4, 2)
    assert decoder["inputs"]["position_ids"] == "position_ids"
    assert config["model"]["eos_token_id"] == 2
    assert config["model"]["context_length"] == 128
    assert config["search"]["past_present_share_buffer"] is shared

    expected = torch_greedy(model, PROMPT, NEW_TOKENS, eos="suppress")
    assert genai_greedy(out, PROMPT, NEW_TOKENS) == expected
    # Not a degenerate reference (one token repeated) that a broken cache could also match.
    assert len(set(expected)) > 3


def test_layers_reading_another_layers_cache_keep_separate_buffers(tmp_path):
    """Gemma 3n's last layers attend over earlier layers' present keys and values with the
    standard Attention op even in a GroupQueryAttention build, so a shared max_length
    buffer would hand them padded caches: past and present must stay separate."""
    from transformers import AutoConfig

    hf_config = AutoConfig.for_model(
        "gemma3n_text",
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=64,
        layer_types=["sliding_attention", "full_attention", "full_attention"],
        sliding_window=4,
        num_kv_shared_layers=1,
        hidden_size_per_layer_input=16,
        vocab_size_per_layer_input=96,
        laurel_rank=8,
        activation_sparsity_pattern=[0.0, 0.0, 0.0],
        initializer_range=0.2,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    model = make_random_model(hf_config, seed=0)
    model.save_pretrained(tmp_path / "hf")
    out = build_with_cli(tmp_path / "hf", tmp_path / "out", "--ep", "cpu", "--runtime", "ort-genai")
    config = json.loads((out / "genai_config.json").read_text())
    assert config["model"]["decoder"]["num_hidden_layers"] == 2  # layer 2 caches nothing
    assert config["search"]["past_present_share_buffer"] is False
    assert genai_greedy(out, PROMPT, NEW_TOKENS) == torch_greedy(
        model, PROMPT, NEW_TOKENS, eos="suppress"
    )


def test_generation_config_sets_ids_and_search_defaults(tiny_llama, tmp_path):
    source, _ = tiny_llama
    (source / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 1, "eos_token_id": [2, 3], "do_sample": True, "top_p": 0.9})
    )
    try:
        out = build_with_cli(source, tmp_path / "out", "--ep", "cpu", "--runtime", "ort-genai")
    finally:
        (source / "generation_config.json").unlink()
    config = json.loads((out / "genai_config.json").read_text())
    assert config["model"]["eos_token_id"] == [2, 3]
    assert config["model"]["pad_token_id"] == 2
    assert (config["search"]["do_sample"], config["search"]["top_p"]) == (True, 0.9)
    og.Model(og.Config(str(out)))  # the generator accepts the file


def test_default_runtime_writes_genai_config_when_the_model_qualifies(tiny_llama, tmp_path):
    source, _ = tiny_llama
    out = build_with_cli(source, tmp_path / "auto", "--ep", "cpu")
    assert (out / "genai_config.json").is_file()
    out = build_with_cli(source, tmp_path / "onnx", "--ep", "cpu", "--runtime", "onnx")
    assert (out / "model.onnx").is_file()
    assert not (out / "genai_config.json").exists()


def test_state_space_model_is_refused(tmp_path, capsys):
    """A model whose layers cache conv/ssm states gets one clear error and no output."""
    from transformers import MambaConfig

    from mobius.cli import main

    MambaConfig(
        vocab_size=128, hidden_size=32, state_size=4, num_hidden_layers=2, intermediate_size=64
    ).save_pretrained(tmp_path / "hf")
    argv = ["build", "--model", str(tmp_path / "hf"), str(tmp_path / "out"), "--no-weights"]
    assert main([*argv, "--quiet", "--runtime", "ort-genai"]) == 1
    error = capsys.readouterr().err
    assert "conv_state" in error and "key/value cache on every layer" in error
    assert not (tmp_path / "out").exists()


def test_default_runtime_builds_state_space_model_without_genai_config(tmp_path, capsys):
    """The default runtime ("auto") builds what the generator cannot run, and says why."""
    from transformers import MambaConfig

    hf_config = MambaConfig(
        vocab_size=128, hidden_size=32, state_size=4, num_hidden_layers=2, intermediate_size=64
    )
    make_random_model(hf_config, seed=0).save_pretrained(tmp_path / "hf")
    out = build_with_cli(tmp_path / "hf", tmp_path / "out")
    assert (out / "model.onnx").is_file()
    assert not (out / "genai_config.json").exists()
    assert "no genai_config.json" in capsys.readouterr().err


# --- SmolLM2-135M-Instruct, the real checkpoint ------------------------------------

SMOLLM2_TOKENS = 32


@pytest.mark.slow  # ~30 s to dequantize the GGUF, then a 135M-parameter build
def test_smollm2_genai_matches_pytorch(smollm2_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = build_with_cli(smollm2_dir, tmp_path / "out", "--ep", "cpu", "--runtime", "ort-genai")
    config = json.loads((out / "genai_config.json").read_text())
    assert config["model"]["decoder"]["head_size"] == 64
    assert config["search"]["past_present_share_buffer"] is True

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    prompt = tokenizer("The capital of France is")["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    expected = torch_greedy(model, prompt, SMOLLM2_TOKENS, eos="suppress")
    del model
    assert genai_greedy(out, prompt, SMOLLM2_TOKENS) == expected
    assert "Paris" in tokenizer.decode(expected)
