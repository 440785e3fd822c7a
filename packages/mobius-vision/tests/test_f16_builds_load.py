"""Every vision–language family's float16 build loads in ONNX Runtime.

A float32 constant computed in the graph and multiplied into float16 activations
(resampling weights, scales) passes the fp32 parity tests and fails only when ONNX
Runtime type-checks the f16 graph. One case per model_type is built from its config
alone (``--no-weights``: the weights become graph inputs, the types are the same) in
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


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_f16_build_loads_in_onnx_runtime(model_type, tmp_path):
    import onnxruntime as ort

    _, make_config, *_ = CASES[model_type]
    make_config().save_pretrained(tmp_path / "hf")
    out = tmp_path / "f16"
    argv = ["build", "--model", str(tmp_path / "hf"), str(out), "--no-weights", "--quiet"]
    assert main([*argv, "--dtype", "f16", "--runtime", "onnx"]) == 0
    graphs = sorted(out.rglob("*.onnx"))
    assert graphs
    for graph in graphs:
        ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
