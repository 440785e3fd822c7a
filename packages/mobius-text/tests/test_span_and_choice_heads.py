"""The question-answering and multiple-choice heads: picked by ``--head auto``, validated,
and refused with one line where they cannot be built.

Parity of every family's span and choice heads is in ``test_encoder_parity.py`` (the
``*-answers-choices`` cases); here a tiny perturbed ``BertForQuestionAnswering`` and
``BertForMultipleChoice`` are built from their checkpoints with no ``--head``, through
``--validate`` (against transformers, and the torch-free smoke run of the choice graph).
"""

from __future__ import annotations

import json

import pytest
from transformers import AutoConfig

from mobius.cli import main
from mobius.testing import assert_smoke_passes, make_random_encoder

TINY_BERT = dict(
    vocab_size=64,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=1,
    num_attention_heads=4,
    max_position_embeddings=32,
    type_vocab_size=2,
)


def _save(model_type: str, head: str, path, **overrides):
    """A perturbed tiny model of ``head`` saved at ``path``."""
    config = AutoConfig.for_model(model_type, **{**TINY_BERT, **overrides})
    make_random_encoder(config, head).save_pretrained(path)
    return path


@pytest.mark.parametrize(
    ("head", "reference", "outputs"),
    [
        ("question-answering", "BertForQuestionAnswering", {"start_logits", "end_logits"}),
        ("multiple-choice", "BertForMultipleChoice", {"logits"}),
    ],
)
def test_auto_head_builds_and_validates_the_checkpoints_class(
    head, reference, outputs, tmp_path, monkeypatch, capsys
):
    source = _save("bert", head, tmp_path / "hf")
    out = tmp_path / "out"
    assert main(["build", "--model", str(source), str(out), "-q", "--validate"]) == 0
    record = json.loads((out / "mobius.json").read_text())
    validation = record["validation"]
    assert validation["reference"] == f"transformers {reference}"
    assert set(validation["diffs"]) == {"last_hidden_state", *outputs}
    assert validation["passed"] and max(validation["diffs"].values()) <= 1e-4
    if head == "multiple-choice":  # the smoke run feeds [batch, choices, sequence]
        assert_smoke_passes(out, source, monkeypatch, tmp_path / "copy")
        capsys.readouterr()
        assert main(["embed", str(out), "w1"]) == 1  # mobius embed has no choices to give
        assert "is a multiple-choice package" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("model_type", "overrides", "head", "message"),
    [
        ("bert", dict(num_labels=3), "question-answering", "needs num_labels 2"),
        ("gte", dict(), "question-answering", "is not built for gte"),
        ("deberta", dict(), "multiple-choice", "not built for deberta"),
        ("canine", dict(), "masked-lm", "canine"),
    ],
)
def test_a_head_the_family_lacks_is_one_line_of_error(
    model_type, overrides, head, message, tmp_path, capsys
):
    source = _save(model_type, "none", tmp_path / "hf", **overrides)  # the bare encoder
    out = tmp_path / "out"
    capsys.readouterr()  # transformers' save progress
    assert main(["build", "--model", str(source), str(out), "-q", "--head", head]) != 0
    error = capsys.readouterr().err.strip()
    assert message in error and len(error.splitlines()) == 1, error
    assert not out.exists()


def test_embed_answers_the_query_from_each_context(tmp_path, capsys):
    """``mobius embed QA_PACKAGE CONTEXT... --query QUESTION``: the span of each context whose
    start and end logits (PyTorch's, on the same pairs) sum highest."""
    import numpy as np
    import torch
    from tokenizers.processors import TemplateProcessing
    from transformers import AutoTokenizer

    from mobius.embedding import MAX_ANSWER_TOKENS
    from mobius.testing import build_with_cli, tiny_tokenizer

    model = make_random_encoder(
        AutoConfig.for_model("bert", **{**TINY_BERT, "vocab_size": 40}), "question-answering"
    )
    model.save_pretrained(tmp_path / "hf")
    tokenizer = tiny_tokenizer(30, {"[CLS]": 30, "[SEP]": 31})
    tokenizer.padding_side = "right"
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 30), ("[SEP]", 31)],
    )
    tokenizer.save_pretrained(tmp_path / "hf")
    out = build_with_cli(tmp_path / "hf", tmp_path / "onnx")
    question, contexts = "w2 w8", ["w4 w5 w6 w7 w9", "w10 w11", "w12 w13 w14 w15 w16 w17"]
    tokenizer = AutoTokenizer.from_pretrained(out)
    batch = tokenizer([question] * 3, contexts, padding=True, return_token_type_ids=True)
    assert 1 in batch["token_type_ids"][0]  # the contexts are the second segment
    with torch.no_grad():
        logits = model(**{k: torch.tensor(v) for k, v in batch.items()})
    expected = []
    for row, context in enumerate(contexts):
        start, end = logits.start_logits[row].numpy(), logits.end_logits[row].numpy()
        tokens = [i for i, seq in enumerate(batch.sequence_ids(row)) if seq == 1]
        pairs = [(i, j) for i in tokens for j in tokens if i <= j < i + MAX_ANSWER_TOKENS]
        i, j = max(pairs, key=lambda p: start[p[0]] + end[p[1]])
        words = context.split()  # one word per token
        expected.append((" ".join(words[i - tokens[0] : j - tokens[0] + 1]), start[i] + end[j]))
    capsys.readouterr()
    assert main(["embed", str(out), *contexts, "--query", question]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["answer"] for r in rows] == [a for a, _ in expected]
    np.testing.assert_allclose([r["score"] for r in rows], [s for _, s in expected], atol=1e-4)
    assert main(["embed", str(out), *contexts]) == 1  # no question
    assert "give the question with --query" in capsys.readouterr().err
