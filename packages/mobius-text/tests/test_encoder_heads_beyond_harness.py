"""Parity of encoder heads the shared harness (``test_encoder_parity.py``) cannot check.

- Longformer's sequence classification, question answering and multiple choice put
  global attention on tokens of their own choosing (``<s>``; the question before the
  first separator; the choice after the first two), so their states differ from the
  bare encoder's, and the span and choice heads need three separators per row
  (transformers asserts it): here the rows are ``<s> question </s></s> text </s>``
  and the states are compared with the head model's ``hidden_states[-1]``.
- Funnel's sequence classification, multiple choice and a bare ``FunnelBaseModel``
  checkpoint have no decoder: ``last_hidden_state`` is the last block's pooled sequence.

Same tolerance as the harness: fp32, max abs diff <= ``PARITY_ATOL``, every parameter perturbed.
"""

from __future__ import annotations

import numpy as np
import pytest
from transformers import AutoConfig

from mobius.testing import (
    PARITY_ATOL,
    build_with_cli,
    make_random_encoder,
    right_padded_batch,
)

SEP = 2
LONGFORMER = dict(
    vocab_size=99,
    hidden_size=32,
    intermediate_size=37,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=64,
    pad_token_id=1,
    sep_token_id=SEP,
    attention_window=[4, 6],
    type_vocab_size=1,
)
FUNNEL = dict(
    vocab_size=99,
    hidden_size=32,
    num_attention_heads=4,
    pad_token_id=0,
    d_head=8,
    d_inner=37,
    block_sizes=[1, 2],
    type_vocab_size=3,
    num_labels=3,
)


def _session(model, workdir, *options):
    import onnxruntime as ort

    model.save_pretrained(workdir / "hf")
    out = build_with_cli(workdir / "hf", workdir / "onnx", *options)
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    return session, [o.name for o in session.get_outputs()]


def _question_rows(lengths, questions, seed=0):
    """``<s> question </s></s> text </s>`` rows, right-padded with ``pad_token_id`` 1."""
    ids, mask, _ = right_padded_batch(list(lengths), 99, 1, seed, pad_token_id=1)
    for row, (length, question) in enumerate(zip(lengths, questions, strict=True)):
        ids[row, 0] = 0
        ids[row, [question, question + 1, length - 1]] = SEP
    return ids, mask


@pytest.mark.parametrize(
    "head, lengths, questions",
    [
        ("sequence-classification", (9, 6), (3, 2)),
        ("question-answering", (11, 8), (3, 2)),
        ("multiple-choice", (11, 8, 10, 7), (3, 2, 4, 2)),
    ],
)
def test_longformer_global_attention_heads(head, lengths, questions, tmp_path):
    import torch

    model = make_random_encoder(AutoConfig.for_model("longformer", **LONGFORMER), head)
    session, names = _session(model, tmp_path, "--head", head)
    ids, mask = _question_rows(lengths, questions)
    feeds = {"input_ids": ids, "attention_mask": mask}
    if head == "multiple-choice":
        feeds = {k: v.reshape(-1, 2, v.shape[-1]) for k, v in feeds.items()}
    got = dict(zip(names, session.run(None, feeds), strict=True))
    with torch.no_grad():
        out = model(**{k: torch.from_numpy(v) for k, v in feeds.items()}, output_hidden_states=True)
    real = mask.astype(bool)
    hidden = got["last_hidden_state"].reshape(*ids.shape, -1)
    diffs = {"states": np.abs(hidden - out.hidden_states[-1].numpy())[real].max()}
    if head == "question-answering":
        for name in ("start_logits", "end_logits"):
            diffs[name] = np.abs(got[name] - getattr(out, name).numpy())[real].max()
    else:
        diffs["logits"] = np.abs(got["logits"] - out.logits.numpy()).max()
    assert max(diffs.values()) <= PARITY_ATOL, diffs


@pytest.mark.parametrize("head", ["sequence-classification", "none"])
def test_funnel_base_model_states(head, tmp_path):
    import torch

    config = AutoConfig.for_model("funnel", **FUNNEL)
    # "none": a bare FunnelBaseModel checkpoint, its head read from the architecture
    model = make_random_encoder(
        config, head, model_class="FunnelBaseModel" if head == "none" else None
    )
    session, names = _session(model, tmp_path, "--head", "auto" if head == "none" else head)
    ids, mask, types = right_padded_batch([9, 6], 99, 3)
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    got = dict(zip(names, session.run(None, feeds), strict=True))
    with torch.no_grad():
        out = model(**{k: torch.from_numpy(v) for k, v in feeds.items()}, output_hidden_states=True)
    states = out.last_hidden_state if head == "none" else out.hidden_states[-1]
    assert got["last_hidden_state"].shape == (2, 5, 32)  # 9 tokens: <cls> and 4 pairs
    diffs = {"states": np.abs(got["last_hidden_state"] - states.numpy()).max()}
    if head != "none":
        diffs["logits"] = np.abs(got["logits"] - out.logits.numpy()).max()
    assert max(diffs.values()) <= PARITY_ATOL, diffs


def test_funnel_multiple_choice(tmp_path):
    """Each choice scored on its own pooled states: ``[batch, choices, pooled, hidden]``."""
    import torch

    config = AutoConfig.for_model("funnel", **FUNNEL)
    model = make_random_encoder(config, "multiple-choice")
    session, names = _session(model, tmp_path, "--head", "multiple-choice")
    ids, mask, types = right_padded_batch([9, 6, 9, 8], 99, 3)  # 2 questions x 2 choices
    feeds = {
        name: value.reshape(2, 2, -1)
        for name, value in {
            "input_ids": ids,
            "attention_mask": mask,
            "token_type_ids": types,
        }.items()
    }
    got = dict(zip(names, session.run(None, feeds), strict=True))
    with torch.no_grad():
        out = model(**{k: torch.from_numpy(v) for k, v in feeds.items()}, output_hidden_states=True)
    assert got["last_hidden_state"].shape == (2, 2, 5, 32)  # 9 tokens: <cls> and 4 pairs
    states = got["last_hidden_state"].reshape(4, 5, 32)
    diffs = {
        "states": np.abs(states - out.hidden_states[-1].numpy()).max(),
        "logits": np.abs(got["logits"] - out.logits.numpy()).max(),
    }
    assert got["logits"].shape == (2, 2)
    assert max(diffs.values()) <= PARITY_ATOL, diffs
