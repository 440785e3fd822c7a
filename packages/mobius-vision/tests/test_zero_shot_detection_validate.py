"""``mobius build --validate`` on zero-shot detectors: tiny models pass, a broken package fails.

A tiny random OWL-ViT and OWLv2 are built with ``--validate`` through the CLI against
``AutoModelForZeroShotObjectDetection``; a copy with one changed weight of the class head
must fail, and without torch both graphs still run (a smoke run).
"""

from __future__ import annotations

import json

import pytest
from transformers import AutoConfig
from zero_shot_detection_parity_cases.owlvit import TINY_OWL

from mobius.cli import main
from mobius.testing import assert_smoke_passes, assert_validation_fails, broken_copy
from mobius_vision.testing._zero_shot_detection_parity import make_random_open_detector

#: The bar of these float32 tiny models (the parity tests').
ATOL = 1e-4
REFERENCES = {"owlvit": "OwlViTForObjectDetection", "owlv2": "Owlv2ForObjectDetection"}


@pytest.fixture(scope="module", params=sorted(REFERENCES))
def built(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    model = make_random_open_detector(AutoConfig.for_model(request.param, **TINY_OWL))
    model.save_pretrained(root / "hf")
    out = root / "out"
    assert main(["build", "--model", str(root / "hf"), str(out), "-q", "--validate"]) == 0
    return root / "hf", out, REFERENCES[request.param]


def test_detector_validates(built):
    _, out, reference = built
    validation = json.loads((out / "mobius.json").read_text())["validation"]
    assert validation["passed"] is True, validation
    assert validation["reference"] == f"transformers {reference}"
    assert {"text_embeds", "logits", "pred_boxes"} <= set(validation["diffs"])
    assert max(validation["diffs"].values()) <= ATOL, validation


def test_detector_with_a_changed_weight_fails(built, tmp_path):
    source, out, _ = built
    broken = broken_copy(out, tmp_path / "broken", "image/model.onnx", "class_head.logit_shift")
    assert_validation_fails(broken, source)


def test_detector_smoke_run(built, monkeypatch, tmp_path):
    source, out, _ = built
    assert_smoke_passes(out, source, monkeypatch, tmp_path / "copy")
