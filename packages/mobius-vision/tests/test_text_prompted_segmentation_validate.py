"""``mobius build --validate`` on CLIPSeg: a tiny model passes, a broken package fails.

A tiny random ``CLIPSegForImageSegmentation`` (with a 48 px image processor, so the graphs run
a resized position table) is built with ``--validate`` through the CLI against transformers'
own class; a copy with one changed weight of the decoder's FiLM must fail, and without torch
both graphs still run (a smoke run).
"""

from __future__ import annotations

import json

import pytest
from text_prompted_segmentation_parity_cases.clipseg import TINY_CLIPSEG
from transformers import AutoConfig

from mobius.cli import main
from mobius.testing import assert_smoke_passes, assert_validation_fails, broken_copy
from mobius_vision.testing._text_prompted_segmentation_parity import (
    make_random_clipseg,
    save_image_processor,
)

#: The bar of these float32 tiny models (the parity tests').
ATOL = 1e-4


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("clipseg")
    model = make_random_clipseg(AutoConfig.for_model("clipseg", **TINY_CLIPSEG))
    model.save_pretrained(root / "hf")
    save_image_processor(root / "hf", (48, 48))
    out = root / "out"
    assert main(["build", "--model", str(root / "hf"), str(out), "-q", "--validate"]) == 0
    return root / "hf", out


def test_clipseg_validates(built):
    _, out = built
    validation = json.loads((out / "mobius.json").read_text())["validation"]
    assert validation["passed"] is True, validation
    assert validation["reference"] == "transformers CLIPSegForImageSegmentation"
    assert set(validation["diffs"]) == {"conditional_embeddings", "logits"}
    assert "48x48" in validation["checked"], validation
    assert max(validation["diffs"].values()) <= ATOL, validation


def test_clipseg_with_a_changed_weight_fails(built, tmp_path):
    source, out = built
    broken = broken_copy(out, tmp_path / "broken", "image/model.onnx", "decoder.film_mul")
    assert_validation_fails(broken, source)


def test_clipseg_smoke_run(built, monkeypatch, tmp_path):
    source, out = built
    assert_smoke_passes(out, source, monkeypatch, tmp_path / "copy")
