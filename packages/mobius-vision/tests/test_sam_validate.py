"""``mobius build --validate`` on a Segment Anything package: the tiny SAM passes, a broken one fails.

The tiny random SAM of the parity case (every parameter perturbed) is built with
``--validate`` through the CLI against transformers' own ``from_pretrained``; a package
whose decoder weight was changed after the build fails; without torch a smoke run of
the same sample passes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sam_parity_cases.sam import SAM_OVERRIDES
from transformers import AutoConfig

from mobius.cli import main
from mobius.testing import PARITY_ATOL, assert_smoke_passes, assert_validation_fails, broken_copy
from mobius_vision.testing import make_random_sam


@pytest.fixture(scope="module")
def sam(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("sam-validate")
    make_random_sam(AutoConfig.for_model("sam", **SAM_OVERRIDES)).save_pretrained(root / "hf")
    out = root / "out"
    assert main(["build", "--model", str(root / "hf"), str(out), "-q", "--validate"]) == 0
    return root / "hf", out


def test_sam_validates(sam):
    validation = json.loads((sam[1] / "mobius.json").read_text())["validation"]
    assert validation["passed"] is True, validation
    assert validation["reference"] == "transformers SamModel"
    assert "boxes/pred_masks" in validation["diffs"] and "image_embeddings" in validation["diffs"]
    assert max(validation["diffs"].values()) <= PARITY_ATOL, validation


def test_sam_with_a_changed_decoder_weight_fails(sam, tmp_path):
    source, out = sam
    broken = broken_copy(
        out, tmp_path / "broken", "prompt_decoder/model.onnx", "iou_prediction_head"
    )
    assert_validation_fails(broken, source)


def test_sam_smoke_run(sam, monkeypatch, tmp_path):
    assert_smoke_passes(sam[1], sam[0], monkeypatch, tmp_path / "copy")
