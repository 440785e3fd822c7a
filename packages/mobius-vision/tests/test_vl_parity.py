"""Synthetic parity of every registered vision–language type against PyTorch.

Each case (see ``vl_parity_cases/``) makes a tiny random transformers VL model with
every parameter perturbed, puts a batch of two prompts with one random image each
through the family's real processor, builds the model with the CLI path in both
``--form split`` and ``--form single``, for ``--ep default`` and ``cpu``, and
checks prefill logits and 8 greedy decode steps through the cache (max abs diff
<= 1e-4) and equal greedy tokens.
"""

from __future__ import annotations

import pytest
from vl_parity_cases import all_cases

from mobius_vision.testing import check_vision_language_parity

CASES = all_cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_vision_language_parity(case, tmp_path):
    _model_type, make_config, make_processor, *options = CASES[case]
    config = make_config()
    kwargs = options[0] if options else {}
    results = check_vision_language_parity(config, make_processor(config), tmp_path, **kwargs)
    assert len(results) == 4
    print({r.ep: f"{r.max_diff:.1e}" for r in results})
