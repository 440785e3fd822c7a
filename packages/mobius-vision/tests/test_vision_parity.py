"""Synthetic parity of every registered mobius-vision type against PyTorch.

Each case (see ``vision_parity_cases/``) makes a tiny random HF model per head
with every parameter perturbed, builds it with the CLI path (``--head``), and
checks ``last_hidden_state`` and ``pooler_output`` (``--head none``, against
``AutoModel``) and ``logits`` (``--head image-classification``, against
``AutoModelForImageClassification``) at fp32 on a batch of two random images
(max abs diff <= 1e-4), for ``--ep default`` and ``cpu``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from transformers import AutoConfig
from vision_parity_cases import all_cases

import mobius_vision
from mobius_vision.testing import check_vision_parity

CASES = all_cases()
SUPPORT_TABLE = Path(__file__).resolve().parents[1] / "scripts" / "support_table.py"


@pytest.mark.parametrize("case", sorted(CASES))
def test_vision_parity(case, tmp_path):
    model_type, overrides, *options = CASES[case]
    hf_config = AutoConfig.for_model(model_type, **overrides)
    results = check_vision_parity(hf_config, tmp_path, **(options[0] if options else {}))
    assert results and all(r.diffs for r in results)


def test_every_registered_type_has_a_parity_case():
    """Every registered key has parity cases in one of the kits scripts/support_table.py
    reads (its KITS and EXTRA_PARITY tables): a kit added without its line there fails here,
    as does a type registered without a case."""
    spec = importlib.util.spec_from_file_location("support_table", SUPPORT_TABLE)
    support_table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(support_table)
    missing = set(mobius_vision.model_types()) - set(support_table.parity_tests())
    assert not missing, f"no parity case for {sorted(missing)}"
    assert mobius_vision.LOAD_ERRORS == {}
