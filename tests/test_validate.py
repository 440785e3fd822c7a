"""``mobius build --validate``: core's tasks pass against transformers, a broken package fails.

Tiny random checkpoints (every parameter perturbed) of a causal LM, a seq2seq model
and an encoder are built with ``--validate`` through the CLI; the report lands in
``mobius.json`` and ``mobius info`` shows it. A package whose weights were changed
after the build fails, and so does a tolerance no float graph meets. Without torch
a smoke inference runs instead, and says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import mobius
import mobius.validate
from mobius.cli import main
from mobius.testing import broken_copy
from mobius.validate import validate_package
from mobius_text.testing import write_tiny_llama


def _build(source: Path, out: Path, *extra: str) -> int:
    return main(["build", "--model", str(source), str(out), "-q", *extra])


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny Llama source and its package, built with --validate."""
    root = tmp_path_factory.mktemp("llama")
    source = write_tiny_llama(root / "hf")
    assert _build(source, root / "out", "--validate") == 0
    return source, root / "out"


def test_causal_lm_validates_against_transformers(llama, capsys):
    _, out = llama
    validation = json.loads((out / "mobius.json").read_text())["validation"]
    assert validation["passed"] is True and validation["tokens_agree"] is True
    assert validation["reference"] == "transformers LlamaForCausalLM"
    assert max(validation["diffs"].values()) <= 1e-4
    assert validation["atol"] == mobius.validate.DEFAULT_ATOL["f32"]
    assert main(["info", str(out)]) == 0
    assert "validated         passed (against transformers LlamaForCausalLM" in (
        capsys.readouterr().out
    )


def test_a_changed_weight_fails_validation(llama, tmp_path):
    source, out = llama
    broken = broken_copy(out, tmp_path / "broken", "model.onnx", "model.norm.weight")
    report = validate_package(broken, source)
    # built without --dtype: the graphs compute in the checkpoint's float32, so tokens count
    assert report.tokens_required and report.atol == mobius.validate.DEFAULT_ATOL["f32"]
    assert not report.passed
    assert any("max abs diff" in reason for reason in report.failures())
    assert json.loads((broken / "mobius.json").read_text())["validation"]["passed"] is False


def test_cli_fails_above_atol_and_keeps_the_package(llama, tmp_path, capsys):
    source, _ = llama
    out = tmp_path / "out"
    assert _build(source, out, "--validate", "--atol", "1e-12") == 1
    err = capsys.readouterr().err
    assert "validation failed: max abs diff" in err and "atol 1e-12" in err
    assert (out / "model.onnx").is_file()  # complete, kept for inspection


def test_atol_needs_validate(llama, tmp_path, capsys):
    source, _ = llama
    assert _build(source, tmp_path / "out", "--atol", "1e-3") == 1
    assert "give --validate too" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_without_torch_a_smoke_inference_runs(llama, monkeypatch):
    source, out = llama
    monkeypatch.setattr(mobius.validate, "reference_missing", lambda *names: "torch")
    report = validate_package(out, source)
    assert report.reference is None and report.passed
    assert "needs torch and transformers" in report.note
    assert "smoke inference on 2 prompts" in report.summary()


def test_a_reference_that_refuses_the_sample_is_one_line(llama, monkeypatch):
    source, out = llama

    def refuse(*args):
        raise ValueError("You must specify exactly one of input_ids or inputs_embeds")

    monkeypatch.setattr("mobius.testing._parity.compare_causal_lm", refuse)
    with pytest.raises(mobius.MobiusError, match="could not compare .*ValueError: You must"):
        validate_package(out, source)


def test_seq2seq_validates(tmp_path):
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    from mobius.testing import perturb_parameters

    config = T5Config(
        vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=2, num_heads=4,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
    )  # fmt: skip
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(config)
    perturb_parameters(model, 0)
    model.save_pretrained(tmp_path / "hf")
    assert _build(tmp_path / "hf", tmp_path / "out", "--validate") == 0
    validation = json.loads((tmp_path / "out" / "mobius.json").read_text())["validation"]
    assert validation["passed"] and validation["tokens_agree"]
    assert set(validation["diffs"]) == {
        "encoder last_hidden_state",
        "prefill logits",
        "decode logits",
    }


def test_encoder_with_a_head_validates(tmp_path):
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    from mobius.testing import perturb_parameters

    config = BertConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=32, max_position_embeddings=32, num_labels=3,
    )  # fmt: skip
    torch.manual_seed(0)
    model = BertForSequenceClassification(config)
    perturb_parameters(model, 0)
    model.save_pretrained(tmp_path / "hf")
    assert _build(tmp_path / "hf", tmp_path / "out", "--validate") == 0
    validation = json.loads((tmp_path / "out" / "mobius.json").read_text())["validation"]
    assert validation["reference"] == "transformers BertForSequenceClassification"
    assert set(validation["diffs"]) == {"last_hidden_state", "logits"}
    assert validation["passed"] and max(validation["diffs"].values()) <= 1e-4
