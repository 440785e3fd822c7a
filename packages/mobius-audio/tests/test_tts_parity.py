"""Synthetic parity of mobius-audio's text-to-audio types (VITS) against transformers.

Each case (``tts_cases/``) makes a tiny ``VitsModel`` with every parameter
perturbed, builds it with the CLI path, speaks a batch of two texts of different
lengths through the runner's own path and compares the padded waveform with
transformers' on the same noise (max abs diff <= 1e-4) and the clip lengths exactly.
"""

from __future__ import annotations

import pytest
from transformers import AutoConfig
from tts_cases import all_cases

import mobius_audio
from mobius_audio.testing import check_tts_parity

CASES = all_cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_tts_parity(case, tmp_path):
    model_type, overrides, options = CASES[case]
    result = check_tts_parity(AutoConfig.for_model(model_type, **overrides), tmp_path, **options)
    assert len(set(result.lengths)) == 2, "the two texts should make clips of different lengths"
    print(case, result)


def test_every_text_to_audio_type_has_a_parity_case():
    speakers = {t for t, cls in mobius_audio.model_types().items() if cls.task == "text-to-audio"}
    covered = {model_type for model_type, *_ in CASES.values()}
    assert speakers - covered == set(), f"no parity case for {sorted(speakers - covered)}"
