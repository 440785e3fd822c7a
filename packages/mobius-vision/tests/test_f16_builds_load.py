"""Every family's float16 build loads in ONNX Runtime.

A float32 constant computed in the graph and multiplied into float16 activations
(resampling weights, scales) passes the fp32 parity tests and fails only when ONNX
Runtime type-checks the f16 graph. One case per model_type (vision–language, vision
encoders and classifiers, zero-shot and image-to-text) is built from its config alone
(``--no-weights``: the weights become graph inputs, the types are the same) in
``--dtype f16``, and each graph of the package is opened with the CPU provider.
"""

from __future__ import annotations

import pytest
from vl_parity_cases import all_cases

from mobius.cli import main


def _one_case_per_type() -> dict[str, tuple]:
    first: dict[str, tuple] = {}
    for case in all_cases().values():
        first.setdefault(case[0], case)
    return first


CASES = _one_case_per_type()


def _encoder_configs() -> dict[str, object]:
    """model_type -> a function making its config: the first case of each type in the
    vision, zero-shot and image-to-text parity tables."""
    from test_image_to_text_parity import CASES as IMAGE_TO_TEXT
    from test_zero_shot_parity import ZERO_SHOT_CASES
    from transformers import AutoConfig
    from vision_parity_cases import all_cases as vision_cases

    makers: dict[str, object] = {}
    for model_type, overrides, *_ in [*vision_cases().values(), *ZERO_SHOT_CASES.values()]:
        makers.setdefault(
            model_type, lambda t=model_type, o=overrides: AutoConfig.for_model(t, **o)
        )
    for model_type, make_config in IMAGE_TO_TEXT.values():
        makers.setdefault(model_type, make_config)
    return makers


ENCODERS = _encoder_configs()


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_f16_build_loads_in_onnx_runtime(model_type, tmp_path):
    _, make_config, *_ = CASES[model_type]
    _assert_f16_build_loads(make_config(), tmp_path)


@pytest.mark.parametrize("model_type", sorted(ENCODERS))
def test_f16_encoder_build_loads_in_onnx_runtime(model_type, tmp_path):
    _assert_f16_build_loads(ENCODERS[model_type](), tmp_path)


def _assert_f16_build_loads(config, tmp_path) -> None:
    import onnxruntime as ort

    config.save_pretrained(tmp_path / "hf")
    out = tmp_path / "f16"
    argv = ["build", "--model", str(tmp_path / "hf"), str(out), "--no-weights", "--quiet"]
    assert main([*argv, "--dtype", "f16", "--runtime", "onnx"]) == 0
    graphs = sorted(out.rglob("*.onnx"))
    assert graphs
    for graph in graphs:
        ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
