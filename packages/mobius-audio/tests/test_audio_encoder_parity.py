"""Synthetic parity of every registered mobius-audio encoder type against PyTorch.

Each case (see ``audio_encoder_cases/``) makes a tiny random HF model per head
(bare, ``*ForCTC``, ``*ForSequenceClassification``) with every parameter
perturbed, builds it with the CLI path, and checks ``last_hidden_state`` and
``logits`` at fp32 on a padded batch of two waveforms from the real feature
extractor, with the attention mask and without it (max abs diff <= 1e-4), for
``--ep default`` and ``cpu``.
"""

from __future__ import annotations

import pytest
from audio_encoder_cases import all_cases
from transformers import AutoConfig

import mobius_audio
from mobius_audio.testing import check_audio_parity

CASES = all_cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_audio_encoder_parity(case, tmp_path):
    model_type, overrides, *options = CASES[case]
    hf_config = AutoConfig.for_model(model_type, **overrides)
    results = check_audio_parity(hf_config, tmp_path, **(options[0] if options else {}))
    assert results and all(r.diffs for r in results)
    print(case, [(r.head, r.ep, r.with_mask, r.diffs) for r in results])


def test_every_audio_encoder_type_has_a_parity_case():
    """Every registered audio-feature-extraction type has a case here (Whisper has its own tests)."""
    encoders = {
        t
        for t, cls in mobius_audio.model_types().items()
        if getattr(cls, "task", None) == "audio-feature-extraction"
    }
    covered = {model_type for model_type, *_ in CASES.values()}
    assert encoders - covered == set(), f"no parity case for {sorted(encoders - covered)}"
