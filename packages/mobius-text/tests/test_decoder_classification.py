"""Decoders' ``*ForSequenceClassification`` (reward models, guard classifiers) against PyTorch.

Each case saves a tiny transformers classifier (every parameter perturbed, the
``score`` head included), builds it with no options (``architectures`` picks the
registration), and compares ``logits`` [batch, num_labels] and ``last_hidden_state``
(at the real tokens) on two prompts of 7 and 4 tokens, padded on the right and on
the left with ``pad_token_id``: the scored token is the rightmost that is not a pad.
"""

from __future__ import annotations

import json

import pytest
import transformers
from decoder_classifier_cases import all_cases
from text_encoder_parity_cases import TINY
from transformers import AutoConfig

from mobius.cli import main
from mobius.testing import PARITY_ATOL, assert_smoke_passes, build_with_cli, perturb_parameters
from mobius_text.testing._classifier import compare_classifier

CASES = all_cases()


def _save(model_type: str, overrides: dict, path, seed: int = 0, whole: bool = False):
    import torch

    base = {} if whole else TINY
    config = AutoConfig.for_model(model_type, **{**base, "num_labels": 3, **overrides})
    torch.manual_seed(seed)
    model = transformers.AutoModelForSequenceClassification.from_config(
        config, dtype=torch.float32, attn_implementation="eager"
    )
    perturb_parameters(model, seed)
    model.eval().save_pretrained(path)
    return model


@pytest.mark.parametrize("case", sorted(CASES))
def test_decoder_classifier_parity(case, tmp_path):
    import onnxruntime as ort

    model_type, overrides, spec = CASES[case]
    model = _save(model_type, overrides, tmp_path / "hf", whole=spec.get("whole", False))
    out = build_with_cli(tmp_path / "hf", tmp_path / "onnx")
    record = json.loads((out / "mobius.json").read_text())
    built = (record["models"][0]["model_type"], record["task"])
    assert built == (spec["model_class"], "text-classification"), built
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    for side in ("right", "left"):
        diffs = compare_classifier(model, session, [7, 4], side=side)
        assert max(diffs.values()) <= PARITY_ATOL, (side, diffs)


def test_validate_and_a_wrong_head(tmp_path, capsys, monkeypatch):
    """``--validate`` against the checkpoint's class, and torch-free (a smoke run); another
    ``--head`` is one line of error."""
    _save("qwen3", {}, tmp_path / "hf")
    out = tmp_path / "out"
    assert main(["build", "--model", str(tmp_path / "hf"), str(out), "-q", "--validate"]) == 0
    validation = json.loads((out / "mobius.json").read_text())["validation"]
    assert validation["reference"] == "transformers Qwen3ForSequenceClassification"
    assert set(validation["diffs"]) == {"last_hidden_state", "logits"}
    assert validation["passed"] and max(validation["diffs"].values()) <= PARITY_ATOL
    assert_smoke_passes(out, tmp_path / "hf", monkeypatch, tmp_path / "copy")
    capsys.readouterr()
    args = ["build", "--model", str(tmp_path / "hf"), str(tmp_path / "no"), "-q"]
    assert main([*args, "--head", "token-classification"]) != 0
    error = capsys.readouterr().err.strip()
    assert "builds sequence-classification" in error and len(error.splitlines()) == 1, error


def test_embed_prints_a_decoder_classifiers_labels(tmp_path, capsys):
    """``mobius embed`` labels each text as PyTorch scores the tokenizer's left-padded batch."""
    import torch
    from transformers import AutoTokenizer

    from mobius.testing import tiny_tokenizer

    texts = ["w5 w6 w7", "w8", "w9 w10 w11 w12"]
    labels = {"id2label": {0: "safe", 1: "unsafe", 2: "unsure"}, "pad_token_id": 3}
    model = _save("llama", dict(labels, vocab_size=40), tmp_path / "hf")
    tiny_tokenizer(40, {"<s>": 2}).save_pretrained(tmp_path / "hf")  # <pad> is id 3
    out = build_with_cli(tmp_path / "hf", tmp_path / "onnx")
    tokenizer = AutoTokenizer.from_pretrained(out)
    with torch.no_grad():
        logits = model(**tokenizer(texts, padding=True, return_tensors="pt")).logits
    expected = [model.config.id2label[int(i)] for i in logits.argmax(-1)]
    capsys.readouterr()
    assert main(["embed", str(out), *texts]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["label"] for r in rows] == expected and [r["text"] for r in rows] == texts
