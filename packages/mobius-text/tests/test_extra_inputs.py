"""A family's own inputs beyond the text (LayoutLM's ``bbox``, RoCBert's shape and
pronunciation ids, TAPAS's seven token-type columns) in ``mobius embed``.

The runner feeds such an input as zeros only where the graph's metadata says that is
what transformers does without it; otherwise it refuses the package by name. Parity
with the inputs given is in ``test_encoder_parity.py`` (the layoutlm, roc_bert and
tapas cases).
"""

from __future__ import annotations

import numpy as np
import pytest
from transformers import AutoConfig

from mobius.embedding import Embedder
from mobius.generate import PackageError
from mobius.testing import build_with_cli, make_random_encoder, tiny_tokenizer

TINY = dict(
    vocab_size=40,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=1,
    num_attention_heads=4,
    max_position_embeddings=32,
)
TEXTS = ["w4 w5 w6 w7", "w8 w9"]


def _package(tmp_path, model_type: str, **overrides):
    """A perturbed tiny bare encoder with a word-level tokenizer, built; ``(model, package)``."""
    model = make_random_encoder(AutoConfig.for_model(model_type, **{**TINY, **overrides}))
    model.save_pretrained(tmp_path / "hf")
    tokenizer = tiny_tokenizer(40, {})
    tokenizer.padding_side = "right"
    tokenizer.save_pretrained(tmp_path / "hf")
    return model, build_with_cli(tmp_path / "hf", tmp_path / "onnx")


def _mean_without_extra_inputs(model, embedder: Embedder) -> np.ndarray:
    """transformers' hidden states of the texts given no extra inputs, meaned over real tokens."""
    import torch

    batch = embedder.tokenizer(TEXTS, padding=True)
    feeds = {k: torch.tensor(v) for k, v in batch.items() if k != "token_type_ids"}
    with torch.no_grad():
        hidden = model(**feeds).last_hidden_state.numpy()
    mask = np.asarray(batch["attention_mask"], np.float32)[..., None]
    return (hidden * mask).sum(1) / mask.sum(1)


def test_embed_feeds_zero_boxes_as_transformers_does_without_them(tmp_path):
    model, package = _package(tmp_path, "layoutlm", max_2d_position_embeddings=16)
    embedder = Embedder(package)
    assert embedder.zero_inputs == {"bbox": ["batch", "sequence", 4]}
    expected = _mean_without_extra_inputs(model, embedder)
    np.testing.assert_allclose(embedder.embed(TEXTS), expected, atol=1e-4)


def test_embed_feeds_tapas_seven_zero_token_type_columns_in_place_of_the_texts(tmp_path):
    sizes = [3, 4, 5, 2, 6, 6, 10]
    model, package = _package(tmp_path, "tapas", type_vocab_sizes=sizes)
    embedder = Embedder(package)
    assert embedder.zero_inputs == {"token_type_ids": ["batch", "sequence", 7]}
    expected = _mean_without_extra_inputs(model, embedder)
    np.testing.assert_allclose(embedder.embed(TEXTS), expected, atol=1e-4)


def test_embed_refuses_ids_whose_absence_transformers_reads_otherwise(tmp_path):
    """RoCBert without ``concat_input`` leaves absent shape ids out of its mean (not zeros)."""
    _, package = _package(
        tmp_path, "roc_bert", concat_input=False, enable_pronunciation=False,
        shape_vocab_size=11, shape_embed_dim=16, pronunciation_vocab_size=7,
        pronunciation_embed_dim=16,
    )  # fmt: skip
    with pytest.raises(PackageError, match=r"takes \['input_shape_ids'\] beside the text"):
        Embedder(package)
