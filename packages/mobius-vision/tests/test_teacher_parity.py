"""Parity of the ``...ForImageClassificationWithTeacher`` classes (DeiT's and LeViT's): the mean
of a class-token head and a distillation head.

``check_vision_parity`` makes its models with ``AutoModelForImageClassification``,
which builds the plain classifier; this checks the teacher heads the same way.
"""

from __future__ import annotations

import onnxruntime as ort
import pytest
import torch
from transformers import (
    DeiTConfig,
    DeiTForImageClassificationWithTeacher,
    LevitConfig,
    LevitForImageClassificationWithTeacher,
)
from vision_parity_cases.deit import DEIT
from vision_parity_cases.levit import LEVIT

from mobius.testing._parity import PARITY_ATOL, build_with_cli, perturb_parameters
from mobius_vision.testing import compare_vision, random_pixels

#: family -> (its transformers config, the teacher class, the case's config overrides)
TEACHERS = {
    "deit": (DeiTConfig, DeiTForImageClassificationWithTeacher, DEIT),
    "levit": (LevitConfig, LevitForImageClassificationWithTeacher, LEVIT),
}


@pytest.mark.parametrize("ep", ["default", "cpu"])
@pytest.mark.parametrize("family", list(TEACHERS))
def test_with_teacher_parity(family, ep, tmp_path):
    config_class, model_class, overrides = TEACHERS[family]
    config = config_class(**overrides)
    torch.manual_seed(0)
    model = model_class(config).to(torch.float32)
    perturb_parameters(model, 0)
    model.eval()
    model.save_pretrained(tmp_path / "hf")
    out = build_with_cli(
        tmp_path / "hf", tmp_path / "onnx", "--ep", ep, "--head", "image-classification"
    )
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    diffs = compare_vision(model, session, random_pixels(config, 2, 0))
    print(f"{family}-with-teacher --ep {ep}: {diffs}")
    assert set(diffs) == {"logits"} and max(diffs.values()) <= PARITY_ATOL, diffs
