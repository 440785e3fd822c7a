"""Synthetic parity of every registered mobius-text encoder–decoder type against PyTorch.

Each case (see ``seq2seq_parity_cases/``) makes a tiny random HF model with every
parameter perturbed, builds its encoder and decoder graphs with the CLI path, and
checks at fp32 (max abs diff <= 1e-4): the encoder's states on a padded batch of
two, the decoder's prefill logits, 8 greedy decode steps through both caches, and
that the greedy tokens equal transformers' ``generate``; at ``--ep default`` and ``cpu``.
"""

from __future__ import annotations

import pytest
from seq2seq_parity_cases import all_cases
from transformers import AutoConfig

from mobius.testing import check_seq2seq_parity

CASES = all_cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_seq2seq_parity(case, tmp_path):
    model_type, overrides, *options = CASES[case]
    hf_config = AutoConfig.for_model(model_type, **overrides)
    results = check_seq2seq_parity(hf_config, tmp_path, **(options[0] if options else {}))
    assert all(len(r.decode_diffs) == 8 for r in results)
