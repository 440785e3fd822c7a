"""Parity of a decoder's sequence classifier (the ``text-classification`` task) against PyTorch."""

from __future__ import annotations

import numpy as np

from mobius_text.testing._text_encoder import padded_batch, run_session


def padded_rows(lengths, vocab_size: int, pad_token_id: int | None, seed: int = 0, side="right"):
    """``input_ids`` and ``attention_mask`` padded on ``side`` with ``pad_token_id`` (0 if none)."""
    pad = 0 if pad_token_id is None else pad_token_id
    return padded_batch(lengths, vocab_size, seed, side, pad_id=pad)


def compare_classifier(torch_model, session, lengths, seed: int = 0, side: str = "right") -> dict:
    """Max abs difference of ``logits`` [batch, num_labels] and of ``last_hidden_state`` over
    the real tokens, for one batch padded with the config's ``pad_token_id``."""
    import torch

    config = torch_model.config
    input_ids, mask = padded_rows(lengths, config.vocab_size, config.pad_token_id, seed, side)
    got = run_session(session, input_ids, mask)
    feeds = dict(input_ids=torch.from_numpy(input_ids), attention_mask=torch.from_numpy(mask))
    with torch.no_grad():
        logits = torch_model(**feeds).logits.float().numpy()
        hidden = torch_model.base_model(**feeds).last_hidden_state.float().numpy()
    real = mask.astype(bool)
    return {
        "last_hidden_state": float(np.abs(got["last_hidden_state"] - hidden)[real].max()),
        "logits": float(np.abs(got["logits"] - logits).max()),
    }
