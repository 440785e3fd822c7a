"""``mobius info`` on model types that mobius-text registers: counts checked against PyTorch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from mobius.cli import main
from mobius_text.testing import TINY_LLAMA_CONFIG, smollm2_gguf


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``mobius ARGV`` in process: (exit code, stdout, stderr); argparse exits are caught."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def info_json(capsys, model: Path | str) -> dict:
    code, out, err = run_cli(capsys, "info", str(model), "--json")
    assert code == 0, err
    return json.loads(out)


def write_config(directory: Path, model_type: str, **fields) -> Path:
    """A config-only model directory (no weights), written by transformers."""
    AutoConfig.for_model(model_type, **fields).save_pretrained(directory)
    return directory


def torch_parameter_count(directory: Path) -> int:
    """What PyTorch counts for the HF model of ``directory``'s config (tied weights once)."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(directory))
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_llama_parameter_count_matches_pytorch(capsys, tmp_path: Path, tied: bool) -> None:
    fields = {k: v for k, v in TINY_LLAMA_CONFIG.items() if k != "model_type"}
    model_dir = write_config(
        tmp_path / "llama", "llama", **dict(fields, tie_word_embeddings=tied), dtype="bfloat16"
    )
    info = info_json(capsys, model_dir)
    expected = torch_parameter_count(model_dir)
    assert info["parameters"] == expected
    assert info["sizes"]["f32"] == 4 * expected
    assert info["sizes"]["f16"] == info["sizes"]["bf16"] == 2 * expected
    # int4: 2 layers x 7 MatMuls + the head; the head reads the table when tied.
    assert info["options"]["--quant int4"] == {
        "applies": True,
        "detail": "15 MatMul weights to MatMulNBits (RTN, a zero point per block of 32)",
    }
    assert 0 < info["sizes"]["int4"] < info["sizes"]["f16"]
    assert info["sizes"]["int4"] < info["sizes"]["int4_f32"] < info["sizes"]["f32"]
    assert (info["model_type"], info["package"], info["task"]) == (
        "llama",
        "mobius-text",
        "causal-lm",
    )
    assert info["verified"] is True
    assert info["checkpoint_dtype"] == "bfloat16"
    assert info["options"]["--runtime ort-genai"]["applies"] is True
    ep = info["options"]["--ep cpu|cuda"]
    assert ep["applies"] is True and "GroupQueryAttention x2" in ep["detail"]


def test_int4_size_of_one_layer_by_hand(capsys, tmp_path: Path) -> None:
    """The int4 figure adds up: packed nibbles + f16 scales and 4-bit zero points per block
    of 32, the rest in f16."""
    hidden, inter, vocab, heads, kv = 64, 96, 128, 4, 2
    model_dir = write_config(
        tmp_path / "llama",
        "llama",
        hidden_size=hidden,
        intermediate_size=inter,
        vocab_size=vocab,
        num_hidden_layers=1,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        tie_word_embeddings=False,
    )
    head_dim = hidden // heads
    # (in, out) of each MatMul: q, k, v, o, gate, up, down, lm_head.
    matmuls = [
        (hidden, hidden),
        (hidden, kv * head_dim),
        (hidden, kv * head_dim),
        (hidden, hidden),
        (hidden, inter),
        (hidden, inter),
        (inter, hidden),
        (hidden, vocab),
    ]
    blocks = [(n, -(-k // 32)) for k, n in matmuls]
    quantized = sum(k * n // 2 for k, n in matmuls)
    quantized += sum(2 * n * b + n * (-(-b // 2)) for n, b in blocks)  # scales, zero points
    floats = vocab * hidden + 3 * hidden  # embeddings, two layer norms, final norm
    info = info_json(capsys, model_dir)
    assert info["sizes"]["int4"] == quantized + 2 * floats


def test_mamba_has_no_ort_genai_support(capsys, tmp_path: Path) -> None:
    model_dir = write_config(
        tmp_path / "mamba",
        "mamba",
        hidden_size=32,
        num_hidden_layers=2,
        vocab_size=64,
        state_size=8,
        conv_kernel=4,
        expand=2,
        time_step_rank=8,
    )
    info = info_json(capsys, model_dir)
    assert info["parameters"] == torch_parameter_count(model_dir)
    runtime = info["options"]["--runtime ort-genai"]
    assert runtime["applies"] is False
    assert runtime["detail"].startswith("not supported:")
    assert "GroupQueryAttention" not in info["options"]["--ep cpu|cuda"]["detail"]

    code, out, err = run_cli(capsys, "info", str(model_dir))
    assert code == 0, err
    line = next(x for x in out.splitlines() if "--runtime ort-genai" in x)
    assert line.split()[:3] == ["--runtime", "ort-genai", "no"]


def test_smollm2_gguf(capsys) -> None:
    code, out, err = run_cli(capsys, "info", str(smollm2_gguf()))
    assert code == 0, err
    rows = {
        name: value.strip()
        for name, value in (line.split("  ", 1) for line in out.splitlines() if "  " in line)
    }
    assert rows["model type"] == "llama"
    assert rows["parameters"] == "134,515,008 (134.52M)"  # tied embeddings counted once
    assert rows["verified"].startswith("yes")
    assert rows["checkpoint dtype"] == "Q4_1 (GGUF)"
    assert rows["size f32"] == "513.1 MiB"
    option = next(line.split() for line in out.splitlines() if "--quant int4" in line)
    assert option[2] == "yes" and "kept as they are" in " ".join(option)
    # Every stored type, with its count, bytes and what a build does with it.
    stored = out.split("stored tensors\n", 1)[1].split("build options", 1)[0].splitlines()
    assert [line.split()[0] for line in stored] == ["Q4_1", "Q8_0", "F32"]
    assert "210 tensors, 63.3 MiB" in stored[0] and "kept: 4-bit blocks of 32" in stored[0]
    assert "1 tensor, 28.7 MiB" in stored[1] and "kept: 8-bit blocks of 32" in stored[1]
    assert stored[2].endswith("stays float")


def test_unknown_model_type_fails_clearly(capsys, tmp_path: Path) -> None:
    model_dir = tmp_path / "odd"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps({"model_type": "lama"}))
    code, out, err = run_cli(capsys, "info", str(model_dir))
    assert code == 1
    assert out == ""
    assert err.startswith("mobius: error: unknown model type 'lama'")
    assert "llama" in err  # a close match


def test_help_describes_the_command(capsys) -> None:
    code, out, _ = run_cli(capsys, "info", "--help")
    assert code == 0
    assert "without downloading or reading its weights" in " ".join(out.split())
    assert "--json" in out
