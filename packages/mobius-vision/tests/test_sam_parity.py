"""Synthetic parity of the mask-generation families (SAM) against PyTorch.

Each case (``sam_parity_cases/``) makes a tiny random model with every parameter
perturbed, builds it with the CLI, and checks the ``image_encoder`` graph against
``get_image_embeddings`` and the ``prompt_decoder`` graph against ``forward`` given the
embeddings, on two different images and four prompts (points, points with boxes,
boxes, a point with a mask prompt), max abs diff <= 1e-4 at fp32.
"""

from __future__ import annotations

import pytest
from sam_parity_cases import all_cases
from transformers import AutoConfig

from mobius.cli import main
from mobius_vision.testing import check_mask_generation_parity

CASES = all_cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_mask_generation_parity(case, tmp_path):
    model_type, overrides, options = CASES[case]
    hf_config = AutoConfig.for_model(model_type, **overrides)
    result = check_mask_generation_parity(hf_config, tmp_path, **options)
    assert "image_embeddings" in result.diffs and "boxes/pred_masks" in result.diffs
    assert "points_and_mask/pred_masks" in result.diffs
    if model_type == "sam2":
        assert "points_and_mask/object_score_logits" in result.diffs


@pytest.mark.parametrize("case", sorted(CASES))
def test_mask_generation_parity_with_fused_ops(case, tmp_path):
    """``--ep cpu`` (ONNX Runtime's fused ops) keeps the parity."""
    model_type, overrides, options = CASES[case]
    hf_config = AutoConfig.for_model(model_type, **overrides)
    check_mask_generation_parity(hf_config, tmp_path, ep="cpu", **options)


@pytest.mark.parametrize("case", sorted(CASES))
def test_f16_build_loads_in_onnx_runtime(case, tmp_path):
    """Every constant computed into the graphs takes the build's dtype (f16 type-checks)."""
    import onnxruntime as ort

    model_type, overrides, _ = CASES[case]
    AutoConfig.for_model(model_type, **overrides).save_pretrained(tmp_path / "hf")
    out = tmp_path / "f16"
    argv = ["build", "--model", str(tmp_path / "hf"), str(out), "--no-weights", "--quiet"]
    assert main([*argv, "--dtype", "f16", "--runtime", "onnx"]) == 0
    for graph in ("image_encoder", "prompt_decoder"):
        ort.InferenceSession(str(out / graph / "model.onnx"), providers=["CPUExecutionProvider"])
