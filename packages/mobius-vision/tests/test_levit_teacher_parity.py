"""Parity of ``LevitForImageClassificationWithTeacher`` (mean of the two classifier heads).

``check_vision_parity`` makes its models with ``AutoModelForImageClassification``,
which builds the plain LeViT classifier; this checks the teacher head the same way.
"""

from __future__ import annotations

import onnxruntime as ort
import pytest
import torch
from transformers import LevitConfig, LevitForImageClassificationWithTeacher
from vision_parity_cases.levit import LEVIT

from mobius.testing._parity import PARITY_ATOL, build_with_cli, perturb_parameters
from mobius_vision.testing import compare_vision, random_pixels


@pytest.mark.parametrize("ep", ["default", "cpu"])
def test_levit_with_teacher_parity(ep, tmp_path):
    config = LevitConfig(**LEVIT)
    torch.manual_seed(0)
    model = LevitForImageClassificationWithTeacher(config).to(torch.float32)
    perturb_parameters(model, 0)
    model.eval()
    model.save_pretrained(tmp_path / "hf")
    out = build_with_cli(
        tmp_path / "hf", tmp_path / "onnx", "--ep", ep, "--head", "image-classification"
    )
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    diffs = compare_vision(model, session, random_pixels(config, 2, 0))
    print(f"levit-with-teacher --ep {ep}: {diffs}")
    assert set(diffs) == {"logits"} and max(diffs.values()) <= PARITY_ATOL, diffs
