"""``mobius build --validate`` on universal-segmentation packages: a tiny MaskFormer and
Mask2Former pass against transformers, a package with one changed weight fails, and without
torch the smoke run passes."""

from __future__ import annotations

import json

import pytest
from transformers import AutoConfig
from universal_segmentation_parity_cases.mask2former import MASK2FORMER
from universal_segmentation_parity_cases.maskformer import MASKFORMER

from mobius.cli import main
from mobius.testing import assert_smoke_passes, assert_validation_fails, broken_copy
from mobius_vision.testing import make_random_segmenter

ATOL = 1e-4
MODELS = {
    "maskformer": (MASKFORMER, "MaskFormerForInstanceSegmentation"),
    "mask2former": (MASK2FORMER, "Mask2FormerForUniversalSegmentation"),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def built(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    overrides, model_class = MODELS[request.param]
    config = AutoConfig.for_model(request.param, **overrides)
    make_random_segmenter(config, model_class=model_class).save_pretrained(root / "hf")
    out = root / "out"
    assert main(["build", "--model", str(root / "hf"), str(out), "-q", "--validate"]) == 0
    return root / "hf", out, model_class


def test_universal_segmenter_validates(built):
    _, out, model_class = built
    validation = json.loads((out / "mobius.json").read_text())["validation"]
    assert validation["passed"] is True, validation
    assert validation["reference"] == f"transformers {model_class}"
    assert set(validation["diffs"]) == {"class_queries_logits", "masks_queries_logits"}
    assert max(validation["diffs"].values()) <= ATOL
    assert "64x64" in validation["checked"]


def test_universal_segmenter_with_a_changed_weight_fails(built, tmp_path):
    source, out, _ = built
    broken = broken_copy(out, tmp_path / "broken", "model.onnx", "class_predictor.weight")
    assert_validation_fails(broken, source)


def test_universal_segmenter_smoke_run(built, monkeypatch, tmp_path):
    assert_smoke_passes(built[1], built[0], monkeypatch, tmp_path / "copy")
