"""Synthetic parity of every registered mobius-text encoder type against PyTorch.

Each case (see ``encoder_parity_cases/``) makes a tiny random HF model per head
with every parameter perturbed, builds it with the CLI path (``--head``), and
checks ``last_hidden_state`` and the head's output at fp32 on a batch of two rows
of different lengths, padded (max abs diff <= 1e-4), for ``--ep default`` and ``cpu``.
"""

from __future__ import annotations

import pytest
from encoder_parity_cases import all_cases, config_fields
from transformers import AutoConfig

from mobius.testing import check_encoder_parity

CASES = all_cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_encoder_parity(case, tmp_path):
    model_type, overrides, *options = CASES[case]
    hf_config = AutoConfig.for_model(model_type, **config_fields(overrides))
    results = check_encoder_parity(hf_config, tmp_path, **(options[0] if options else {}))
    assert results and all(r.diffs for r in results)
