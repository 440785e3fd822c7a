"""Synthetic parity of mobius-vision's object detectors against PyTorch.

Each case (see ``detection_parity_cases/``) makes a tiny random
``XxxForObjectDetection`` with every parameter perturbed, builds it with the CLI
(``--ep default`` and ``cpu``), and checks ``logits`` and ``pred_boxes`` at fp32 on a
batch of two random images, the second padded where the graph takes ``pixel_mask``
(max abs diff <= 1e-4).
"""

from __future__ import annotations

import pytest
from detection_parity_cases import all_cases
from transformers import AutoConfig

from mobius_vision.testing import check_detection_parity

CASES = all_cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_detection_parity(case, tmp_path):
    model_type, overrides, *options = CASES[case]
    hf_config = AutoConfig.for_model(model_type, **overrides)
    results = check_detection_parity(hf_config, tmp_path, **(options[0] if options else {}))
    assert results and all(r.diffs for r in results)


def _one_case_per_type() -> dict[str, tuple]:
    first: dict[str, tuple] = {}
    for case in CASES.values():
        first.setdefault(case[0], case)
    return first


@pytest.mark.parametrize("model_type", sorted(_one_case_per_type()))
def test_f16_build_loads_in_onnx_runtime(model_type, tmp_path):
    """A float32 constant meeting float16 activations fails only when ONNX Runtime type-checks
    the f16 graph: each family's f16 build (from its config, ``--no-weights``) must load."""
    from test_f16_builds_load import _assert_f16_build_loads

    _, overrides, *_ = _one_case_per_type()[model_type]
    _assert_f16_build_loads(AutoConfig.for_model(model_type, **overrides), tmp_path)
