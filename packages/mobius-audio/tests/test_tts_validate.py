"""``mobius build --validate`` on a text-to-audio package: a tiny VITS passes, a broken one fails.

The tiny random VITS of the parity cases is built once with ``--validate`` through
the CLI: its sample texts' waveform is compared with transformers' ``VitsModel``
(``from_pretrained``) on the same noise. A copy whose vocoder weight was changed
fails; without torch a smoke inference of the same sample passes.
"""

from __future__ import annotations

import json

import pytest
from transformers import AutoConfig
from tts_cases.vits import VITS

from mobius.cli import main
from mobius.testing import PARITY_ATOL, assert_smoke_passes, assert_validation_fails, broken_copy
from mobius_audio.testing import make_random_vits


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(source, package)``: a tiny VITS checkpoint and its package, built with ``--validate``."""
    root = tmp_path_factory.mktemp("vits-validate")
    make_random_vits(AutoConfig.for_model("vits", **VITS), root / "hf", seed=2)
    out = root / "onnx"
    assert main(["build", "--model", str(root / "hf"), str(out), "-q", "--validate"]) == 0
    return root / "hf", out


def test_validate_passes_against_transformers(built):
    _, package = built
    validation = json.loads((package / "mobius.json").read_text())["validation"]
    assert validation["passed"] is True, validation
    assert validation["reference"] == "transformers VitsModel"
    assert set(validation["diffs"]) == {"waveform"}
    assert validation["diffs"]["waveform"] <= PARITY_ATOL


def test_validate_fails_a_changed_weight(built, tmp_path):
    source, package = built
    broken = broken_copy(package, tmp_path / "broken", "vocoder/model.onnx", "decoder.conv_post")
    assert_validation_fails(broken, source)


def test_validate_without_torch_runs_the_graphs(built, tmp_path, monkeypatch):
    source, package = built
    assert "smoke inference" in assert_smoke_passes(package, source, monkeypatch, tmp_path / "c")
