"""Parity of a text-encoder package (:mod:`mobius_text.text_encoder`) with transformers' bare model."""

from __future__ import annotations

import numpy as np

HIDDEN_STATE_PREFIX = "hidden_states."


def padded_batch(lengths, vocab_size: int, seed: int = 0, side: str = "right", pad_id: int = 0):
    """``input_ids`` and ``attention_mask`` [batch, max(lengths)], padded on ``side`` with ``pad_id``.

    Real ids avoid 0-3, where tokenizers keep their pad and special tokens.
    """
    rng = np.random.default_rng(seed)
    width = max(lengths)
    input_ids = np.full((len(lengths), width), pad_id, np.int64)
    mask = np.zeros_like(input_ids)
    for row, length in enumerate(lengths):
        real = slice(0, length) if side == "right" else slice(width - length, width)
        input_ids[row, real] = rng.integers(4, vocab_size, length)
        mask[row, real] = 1
    return input_ids, mask


def run_session(session, input_ids: np.ndarray, attention_mask: np.ndarray) -> dict:
    """The package's outputs by name for one batch."""
    names = [o.name for o in session.get_outputs()]
    feeds = {"input_ids": input_ids, "attention_mask": attention_mask}
    return dict(zip(names, session.run(None, feeds), strict=True))


def compare_text_encoder(
    torch_model, session, lengths, seed: int = 0, side: str = "right", head: dict | None = None
):
    """Max abs difference of each output over the real tokens of a padded batch.

    ``last_hidden_state`` and each ``hidden_states.{i}`` are compared with the
    bare model's (``torch_model.base_model``: a causal LM's backbone) output and
    ``hidden_states[i]`` with ``output_hidden_states=True``, fed the same ids and mask.
    A head's outputs, as ``head`` describes it: ``sentence_embedding`` with the last
    state pooled (``pooling``, ``normalize``) as sentence-transformers pools;
    ``logits`` [batch, 1] with ``torch_model``'s (a causal LM) logit of
    ``score_token_ids[0]`` less that of ``[1]`` at the last real token.
    """
    import torch

    from mobius.testing import pool_like_sentence_transformers as pool

    head = head or {}
    vocab_size = torch_model.config.get_text_config().vocab_size
    input_ids, mask = padded_batch(lengths, vocab_size, seed, side)
    got = run_session(session, input_ids, mask)
    feeds = dict(input_ids=torch.from_numpy(input_ids), attention_mask=torch.from_numpy(mask))
    with torch.no_grad():
        out = torch_model.base_model(**feeds, output_hidden_states=True)
        logits = torch_model(**feeds).logits.float().numpy() if "logits" in got else None
    real = mask.astype(bool)
    expected = {"last_hidden_state": out.last_hidden_state.float().numpy()}
    for name in got:
        if name.startswith(HIDDEN_STATE_PREFIX):
            index = int(name.removeprefix(HIDDEN_STATE_PREFIX))
            expected[name] = out.hidden_states[index].float().numpy()
    if "sentence_embedding" in got:
        pooled = pool(expected["last_hidden_state"], mask, head["pooling"], head["normalize"])
        expected["sentence_embedding"] = pooled
    if logits is not None:
        last = pool(logits, mask, "lasttoken", False)  # [batch, vocab]
        yes, no = head["score_token_ids"]
        expected["logits"] = last[:, [yes]] - last[:, [no]]
    assert set(got) == set(expected), f"outputs {sorted(got)}, compared {sorted(expected)}"
    diffs = {}
    for name, value in expected.items():
        diff = np.abs(got[name] - value)
        diffs[name] = float((diff[real] if diff.ndim == 3 else diff).max())
    return diffs
