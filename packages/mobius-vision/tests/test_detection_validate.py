"""``mobius build --validate`` on object detectors: tiny models pass, a broken package fails.

A tiny random DETR (a padded second image: the mask path) and YOLOS (its config's image
size: the position tables as they are) are built with ``--validate`` through the CLI
against ``AutoModelForObjectDetection``; a copy with one changed weight must fail, and
without torch the sample still runs through the graph (a smoke run).
"""

from __future__ import annotations

import json

import pytest
from detection_parity_cases._tiny import TINY_DETR
from detection_parity_cases.yolos import YOLOS
from transformers import AutoConfig

from mobius.cli import main
from mobius.testing import assert_smoke_passes, assert_validation_fails, broken_copy
from mobius_vision.testing import make_random_detector

#: The bar of these float32 tiny models (the parity tests').
ATOL = 1e-4
CASES = {
    "detr": ("detr", TINY_DETR, "DetrForObjectDetection"),
    "yolos": ("yolos", YOLOS, "YolosForObjectDetection"),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def built(request, tmp_path_factory):
    model_type, overrides, reference = CASES[request.param]
    root = tmp_path_factory.mktemp(request.param)
    make_random_detector(AutoConfig.for_model(model_type, **overrides)).save_pretrained(root / "hf")
    out = root / "out"
    assert main(["build", "--model", str(root / "hf"), str(out), "-q", "--validate"]) == 0
    return root / "hf", out, reference


def test_detector_validates(built):
    _, out, reference = built
    validation = json.loads((out / "mobius.json").read_text())["validation"]
    assert validation["passed"] is True, validation
    assert validation["reference"] == f"transformers {reference}"
    assert set(validation["diffs"]) == {"logits", "pred_boxes"}
    assert max(validation["diffs"].values()) <= ATOL, validation


def test_detector_with_a_changed_weight_fails(built, tmp_path):
    source, out, _ = built
    broken = broken_copy(out, tmp_path / "broken", "model.onnx", "class_labels_classifier")
    assert_validation_fails(broken, source)


def test_detector_smoke_run(built, monkeypatch, tmp_path):
    source, out, _ = built
    assert_smoke_passes(out, source, monkeypatch, tmp_path / "copy")
