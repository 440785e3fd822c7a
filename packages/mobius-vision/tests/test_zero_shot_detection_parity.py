"""Synthetic parity of mobius-vision's zero-shot object detectors against PyTorch.

Each case (see ``zero_shot_detection_parity_cases/``) makes a tiny random
``XxxForObjectDetection`` (OWL-ViT, OWLv2) with every parameter perturbed, builds it with
the CLI (``--ep default`` and ``cpu``), and checks the text graph's ``text_embeds`` and the
image graph's ``logits``, ``pred_boxes``, ``class_embeds``, ``image_embeds`` (OWLv2:
``objectness_logits``) at fp32 on two random images and three query texts of different
lengths (max abs diff <= 1e-4).
"""

from __future__ import annotations

import pytest
from transformers import AutoConfig
from zero_shot_detection_parity_cases import all_cases

from mobius_vision.testing._zero_shot_detection_parity import check_zero_shot_detection_parity

CASES = all_cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_zero_shot_detection_parity(case, tmp_path):
    model_type, overrides, *options = CASES[case]
    hf_config = AutoConfig.for_model(model_type, **overrides)
    results = check_zero_shot_detection_parity(
        hf_config, tmp_path, **(options[0] if options else {})
    )
    assert results and all(r.diffs for r in results)


@pytest.mark.parametrize("model_type", sorted({case[0] for case in CASES.values()}))
def test_f16_build_loads_in_onnx_runtime(model_type, tmp_path):
    """A float32 constant (the box bias, the class head's epsilon) meeting float16 activations
    fails only when ONNX Runtime type-checks the f16 graphs: both must load."""
    from test_f16_builds_load import _assert_f16_build_loads

    overrides = next(case[1] for case in CASES.values() if case[0] == model_type)
    _assert_f16_build_loads(AutoConfig.for_model(model_type, **overrides), tmp_path)


def test_text_width_unlike_projection_is_refused(tmp_path, capsys):
    """The class head maps each patch to the text tower's width and compares it with the
    projected queries: a config where the two differ is refused in one line."""
    from zero_shot_detection_parity_cases.owlvit import TINY_OWL

    from mobius.cli import main

    config = AutoConfig.for_model("owlvit", **dict(TINY_OWL, projection_dim=16))
    config.save_pretrained(tmp_path / "hf")
    argv = ["build", "--model", str(tmp_path / "hf"), str(tmp_path / "out"), "--no-weights"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "must equal projection_dim (16)" in err[0], err
