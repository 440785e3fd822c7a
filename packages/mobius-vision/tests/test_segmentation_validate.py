"""``mobius build --validate`` on semantic-segmentation packages: a tiny SegFormer passes
against transformers, a package with one changed weight fails, and without torch the
smoke run passes."""

from __future__ import annotations

import json

import pytest
import transformers
from segmentation_parity_cases.segformer import SEGFORMER
from transformers import AutoConfig

from mobius.cli import main
from mobius.testing import assert_smoke_passes, assert_validation_fails, broken_copy
from mobius_vision.testing import make_random_segmenter

ATOL = 1e-4


@pytest.fixture(scope="module")
def segformer(tmp_path_factory):
    root = tmp_path_factory.mktemp("segformer")
    make_random_segmenter(AutoConfig.for_model("segformer", **SEGFORMER)).save_pretrained(
        root / "hf"
    )
    size = {"height": 32, "width": 48}
    transformers.SegformerImageProcessorPil(size=size).save_pretrained(root / "hf")
    out = root / "out"
    assert main(["build", "--model", str(root / "hf"), str(out), "-q", "--validate"]) == 0
    return root / "hf", out


def test_segmenter_validates(segformer):
    validation = json.loads((segformer[1] / "mobius.json").read_text())["validation"]
    assert validation["passed"] is True, validation
    assert validation["reference"] == "transformers SegformerForSemanticSegmentation"
    assert set(validation["diffs"]) == {"logits"} and validation["diffs"]["logits"] <= ATOL
    assert "32x48" in validation["checked"]


def test_segmenter_with_a_changed_weight_fails(segformer, tmp_path):
    source, out = segformer
    broken = broken_copy(out, tmp_path / "broken", "model.onnx", "decode_head.classifier.weight")
    assert_validation_fails(broken, source)


def test_segmenter_smoke_run(segformer, monkeypatch, tmp_path):
    assert_smoke_passes(segformer[1], segformer[0], monkeypatch, tmp_path / "copy")
