"""Synthetic parity of the models that see and hear (``audio-vision-language``) against PyTorch.

Each case (``omni_parity_cases``) makes a tiny random transformers model with every
parameter perturbed, puts a batch of two prompts, each with an image and an audio clip,
through the family's real processor, builds the model with the CLI in both
``--form split`` and ``--form single``, for ``--ep default`` and ``cpu``, and checks
prefill logits and 8 greedy decode steps through the cache (max abs diff <= 1e-4) and
equal greedy tokens.
"""

from __future__ import annotations

import pytest
from omni_parity_cases import CASES

from mobius_vision.testing import check_audio_vision_language_parity


@pytest.mark.parametrize("case", sorted(CASES))
def test_audio_vision_language_parity(case, tmp_path):
    _model_type, make_config, make_processor, options = CASES[case]
    config = make_config()
    results = check_audio_vision_language_parity(
        config, make_processor(config), tmp_path, **options
    )
    assert len(results) == 4
    print({r.ep: f"{r.max_diff:.1e}" for r in results})
