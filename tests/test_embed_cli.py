"""``mobius embed`` on a tiny random BERT: embeddings as PyTorch pools them, a classifier's labels.

Real sentence-transformers parity is in test_minilm_checkpoint.py; here the mean
pooling (no sentence_embedding output), the label path and the refusals, fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from transformers import BertConfig

from mobius.cli import main
from mobius.errors import MobiusError
from mobius.testing import build_with_cli, make_random_encoder, tiny_tokenizer

TEXTS = ["w1 w2 w3", "w4", "w5 w6 w7 w8 w9"]


def _bert(tmp_path: Path, head: str, num_labels: int = 3) -> tuple[object, Path]:
    labels = ("negative", "neutral", "positive") if num_labels == 3 else ("score",)
    config = BertConfig(
        vocab_size=40,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=32,
        num_labels=num_labels,
        id2label=dict(enumerate(labels)),
    )
    model = make_random_encoder(config, head)
    model.save_pretrained(tmp_path / "hf")
    tokenizer = tiny_tokenizer(30, {"[CLS]": 30, "[SEP]": 31})
    tokenizer.padding_side = "right"
    if num_labels == 1:  # a reranker's tokenizer: BERT's pair template and segment ids
        from tokenizers.processors import TemplateProcessing

        tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", 30), ("[SEP]", 31)],
        )
    tokenizer.save_pretrained(tmp_path / "hf")
    return model, build_with_cli(tmp_path / "hf", tmp_path / "onnx", "--head", head)


def _torch_outputs(model, tokenizer_dir: Path):
    import torch
    from transformers import AutoTokenizer

    batch = AutoTokenizer.from_pretrained(tokenizer_dir)(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model(**batch), batch["attention_mask"].numpy()


def test_embed_without_a_sentence_head_mean_pools_last_hidden_state(tmp_path, capsys):
    model, out = _bert(tmp_path, "none")
    outputs, mask = _torch_outputs(model, out)
    hidden = outputs.last_hidden_state.numpy()
    expected = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    capsys.readouterr()
    assert main(["embed", str(out), *TEXTS]) == 0
    got = np.array([json.loads(line) for line in capsys.readouterr().out.splitlines()])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)


def test_embed_prints_a_classifiers_labels(tmp_path, capsys):
    model, out = _bert(tmp_path, "sequence-classification")
    outputs, _ = _torch_outputs(model, out)
    labels = [model.config.id2label[int(i)] for i in outputs.logits.numpy().argmax(-1)]
    capsys.readouterr()
    assert main(["embed", str(out), *TEXTS]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["label"] for r in rows] == labels and [r["text"] for r in rows] == TEXTS
    assert all(0 < r["score"] <= 1 for r in rows)


def test_a_reranker_scores_each_text_against_the_query(tmp_path, capsys):
    import torch
    from transformers import AutoTokenizer

    model, out = _bert(tmp_path, "sequence-classification", num_labels=1)
    query = "w2 w8"
    tokenizer = AutoTokenizer.from_pretrained(out)
    batch = tokenizer(
        [query] * 3, TEXTS, padding=True, return_token_type_ids=True, return_tensors="pt"
    )
    assert (batch["token_type_ids"] == 1).any()  # the pairs are real pairs: two segments
    with torch.no_grad():
        expected = model(**batch).logits[:, 0].numpy()
    capsys.readouterr()
    assert main(["embed", str(out), *TEXTS, "--query", query]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["text"] for r in rows] == TEXTS and {r["label"] for r in rows} == {"score"}
    np.testing.assert_allclose([r["score"] for r in rows], expected, rtol=0, atol=1e-5)
    # --query on a package that embeds is refused
    _, embedder = _bert(tmp_path / "plain", "none")
    assert main(["embed", str(embedder), "w1", "--query", query]) == 1
    assert "--query pairs texts for a reranker" in capsys.readouterr().err


def test_embed_refuses_what_is_not_an_encoder_package(tmp_path, capsys):
    from mobius.embedding import Embedder
    from mobius_text.testing import write_tiny_llama

    out = build_with_cli(write_tiny_llama(tmp_path / "llama"), tmp_path / "onnx")
    with pytest.raises(MobiusError, match="not a feature-extraction package"):
        Embedder(out)
    assert main(["embed", str(tmp_path / "missing"), "hi"]) == 1
    assert "no model.onnx in" in capsys.readouterr().err


def test_mobius_embed_stays_the_function_once_its_module_is_imported():
    import mobius
    import mobius.embedding  # a submodule named like the function would shadow it

    assert mobius.embed is mobius.embedding.embed


def test_an_unwritable_output_is_one_line(tmp_path, capsys):
    _, out = _bert(tmp_path, "none")
    capsys.readouterr()
    assert main(["embed", str(out), "w1", "--output", str(tmp_path / "no" / "dir" / "e.npy")]) == 1
    assert capsys.readouterr().err.startswith("mobius: error: cannot write ")
