"""Synthetic parity of every registered mobius-vision type against PyTorch.

Each case (see ``vision_parity_cases/``) makes a tiny random HF model per head
with every parameter perturbed, builds it with the CLI path (``--head``), and
checks ``last_hidden_state`` and ``pooler_output`` (``--head none``, against
``AutoModel``) and ``logits`` (``--head image-classification``, against
``AutoModelForImageClassification``) at fp32 on a batch of two random images
(max abs diff <= 1e-4), for ``--ep default`` and ``cpu``.
"""

from __future__ import annotations

import pytest
from transformers import AutoConfig
from vision_parity_cases import all_cases

import mobius_vision
from mobius_vision.testing import check_vision_parity

CASES = all_cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_vision_parity(case, tmp_path):
    model_type, overrides, *options = CASES[case]
    hf_config = AutoConfig.for_model(model_type, **overrides)
    results = check_vision_parity(hf_config, tmp_path, **(options[0] if options else {}))
    assert results and all(r.diffs for r in results)


def test_every_registered_type_has_a_parity_case():
    """Zero-shot image–text types (CLIP, SigLIP) and SigLIP 2's NaFlex tower have theirs in
    test_zero_shot_parity.py, vision–language types in test_vl_parity.py (Mllama's
    cross-attention contract in test_mllama_parity.py), image-to-text types in
    test_image_to_text_parity.py, the omni thinkers in test_omni_parity.py (Gemma 4 unified in
    test_gemma4_unified_parity.py) and Phi-4-multimodal in test_phi4mm_parity.py."""
    from omni_parity_cases import CASES as OMNI_CASES
    from omni_parity_cases_gemma4_unified import CASES as GEMMA4_UNIFIED_CASES
    from test_image_to_text_parity import CASES as IMAGE_TO_TEXT_CASES
    from test_mllama_parity import CASES as MLLAMA_CASES
    from test_phi4mm_parity import CASES as PHI4MM_CASES
    from test_zero_shot_parity import NAFLEX_VISION_CASES, ZERO_SHOT_CASES
    from vl_parity_cases import all_cases as vision_language_cases

    other = [*ZERO_SHOT_CASES.values(), *NAFLEX_VISION_CASES.values()]
    other += vision_language_cases().values()
    other += MLLAMA_CASES.values()
    other += IMAGE_TO_TEXT_CASES.values()
    other += OMNI_CASES.values()
    other += PHI4MM_CASES.values()
    other += GEMMA4_UNIFIED_CASES.values()
    covered = {model_type for model_type, *_ in [*CASES.values(), *other]}
    missing = set(mobius_vision.model_types()) - covered
    assert not missing, f"no parity case for {sorted(missing)}"
    assert mobius_vision.LOAD_ERRORS == {}
