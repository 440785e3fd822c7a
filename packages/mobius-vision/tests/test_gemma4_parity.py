"""Gemma 4 against PyTorch on the audio-vision-language kit (``check_audio_vision_language_parity``):
the cases of ``omni_parity_cases_gemma4.py``, a batch of two left-padded prompts through the
real processor, both forms, both eps, prefill and 8 cached decode steps, 1e-4.

- with its audio tower: each prompt holds an image and an audio clip;
- without ``audio_config``: images alone, and the package holds no audio graph (its single
  graph takes no audio inputs).

(The image runs that attend both ways are checked in ``test_gemma4_bidirectional_parity.py``.)
"""

from __future__ import annotations

import onnx
import pytest
from omni_parity_cases_gemma4 import CASES
from test_f16_builds_load import _assert_f16_build_loads

from mobius_vision.testing import check_audio_vision_language_parity


@pytest.mark.parametrize("case", sorted(CASES))
def test_audio_vision_language_parity(case, tmp_path):
    _model_type, make_config, make_processor, options = CASES[case]
    config = make_config()
    results = check_audio_vision_language_parity(
        config, make_processor(config), tmp_path, **options
    )
    assert len(results) == 4
    hears = config.audio_config is not None
    assert (tmp_path / "split-default" / "audio" / "model.onnx").is_file() == hears
    single = onnx.load(str(tmp_path / "single-default" / "model.onnx"), load_external_data=False)
    inputs = {i.name for i in single.graph.input}
    assert ({"input_features", "input_features_mask"} <= inputs) == hears, sorted(inputs)


@pytest.mark.parametrize("case", sorted(CASES))
def test_f16_build_loads_in_onnx_runtime(case, tmp_path):
    """Each graph of the f16 build (the audio tower's too) passes ONNX Runtime's type checks
    (``test_f16_builds_load.py`` covers the vision–language kit's cases, not these)."""
    _assert_f16_build_loads(CASES[case][1](), tmp_path)
