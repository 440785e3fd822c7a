"""Gemma 3n against PyTorch on the audio-vision-language kit (``check_audio_vision_language_parity``):
the case of ``omni_parity_cases_gemma3n.py``, a batch of two left-padded prompts through the
real processor, each with an image and an audio clip, both forms, both eps, prefill and 8
cached decode steps, 1e-4. transformers builds the vision tower with timm: without it the
case skips (the config is made in the test)."""

from __future__ import annotations

import logging

import onnx
import pytest
from omni_parity_cases_gemma3n import AUDIO_OFFSET, CASES, gemma3n_hf_config
from test_f16_builds_load import _assert_f16_build_loads

from mobius.cli import main
from mobius_vision.testing import check_audio_vision_language_parity


@pytest.mark.parametrize("case", sorted(CASES))
def test_audio_vision_language_parity(case, tmp_path):
    _model_type, make_config, make_processor, options = CASES[case]
    config = make_config()
    results = check_audio_vision_language_parity(
        config, make_processor(config), tmp_path, **options
    )
    assert len(results) == 4
    assert (tmp_path / "split-default" / "audio" / "model.onnx").is_file()
    single = onnx.load(str(tmp_path / "single-default" / "model.onnx"), load_external_data=False)
    inputs = {i.name for i in single.graph.input}
    assert {"pixel_values", "input_features", "input_features_mask"} <= inputs, sorted(inputs)


def test_f16_build_loads_in_onnx_runtime(tmp_path):
    """Each graph of the f16 build (the audio tower's too) passes ONNX Runtime's type checks;
    mobius builds from the config alone, so this runs without timm."""
    _assert_f16_build_loads(gemma3n_hf_config(), tmp_path)


def test_audio_that_cannot_be_padded_builds_no_audio_graph(tmp_path, caplog):
    """A text vocabulary whose last id (the audio padding token) is outside ``embed_audio``'s
    table: transformers cannot take audio, so the package holds no audio graph, and says so."""
    config = gemma3n_hf_config()
    config.text_config.vocab_size = AUDIO_OFFSET  # its last id is the vision range's
    config.save_pretrained(tmp_path / "hf")
    argv = ["build", "--model", str(tmp_path / "hf"), str(tmp_path / "out"), "--no-weights"]
    with caplog.at_level(logging.WARNING, logger="mobius"):
        assert main([*argv, "--form", "split", "--quiet"]) == 0
    assert (tmp_path / "out" / "vision" / "model.onnx").is_file()
    assert not (tmp_path / "out" / "audio").exists()
    assert "outside embed_audio's table: no audio graph" in caplog.text
