"""``mobius build --validate`` on a SAM 2 package: the tiny SAM 2 passes, a broken one fails.

The tiny random SAM 2 of the parity case (every parameter perturbed) is built with
``--validate`` through the CLI against transformers' own ``from_pretrained``; a package
whose image encoder or decoder weight was changed after the build fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sam_parity_cases.sam2 import SAM2_OVERRIDES
from transformers import AutoConfig

from mobius.cli import main
from mobius.testing import PARITY_ATOL, assert_validation_fails, broken_copy
from mobius_vision.testing import make_random_sam


@pytest.fixture(scope="module")
def sam2(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("sam2-validate")
    config = AutoConfig.for_model("sam2", **SAM2_OVERRIDES)
    make_random_sam(config, "Sam2Model").save_pretrained(root / "hf")
    out = root / "out"
    assert main(["build", "--model", str(root / "hf"), str(out), "-q", "--validate"]) == 0
    return root / "hf", out


def test_sam2_validates(sam2):
    validation = json.loads((sam2[1] / "mobius.json").read_text())["validation"]
    assert validation["passed"] is True, validation
    assert validation["reference"] == "transformers Sam2Model"
    diffs = validation["diffs"]
    assert {"boxes/pred_masks", "image_embeddings", "high_resolution_features.0"} <= set(diffs)
    assert max(diffs.values()) <= PARITY_ATOL, validation


@pytest.mark.parametrize(
    ("graph", "weight"),
    [("image_encoder", "conv_s0"), ("prompt_decoder", "obj_score_token")],
)
def test_sam2_with_a_changed_weight_fails(sam2, tmp_path, graph, weight):
    source, out = sam2
    broken = broken_copy(out, tmp_path / "broken", f"{graph}/model.onnx", weight)
    assert_validation_fails(broken, source)
