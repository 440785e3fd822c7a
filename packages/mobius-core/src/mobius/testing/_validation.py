"""Test helpers for ``mobius build --validate``: break a built package, expect the verdicts."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np


def broken_copy(package: Path, destination: Path, graph: str, initializer: str) -> Path:
    """A copy of ``package`` at ``destination`` with one weight scaled and shifted, as a
    misread config field would leave it: the first initializer of ``graph`` (a path
    inside the package, ``"model.onnx"``) whose name holds ``initializer``."""
    import onnx

    broken = shutil.copytree(package, destination)
    path = broken / graph
    model = onnx.load(str(path))
    tensor = next(t for t in model.graph.initializer if initializer in t.name)
    values = onnx.numpy_helper.to_array(tensor) * 1.5 + 0.1
    tensor.CopyFrom(onnx.numpy_helper.from_array(values.astype(np.float32), tensor.name))
    onnx.save(model, str(path), save_as_external_data=True, location=path.name + ".data")
    return broken


def assert_validation_fails(broken: Path, source: Path) -> None:
    """``validate_package`` fails ``broken`` on its differences, and records the failure."""
    import json

    from mobius.validate import validate_package

    report = validate_package(broken, source)
    assert not report.passed
    assert any("max abs diff" in reason for reason in report.failures()), report.failures()
    assert json.loads((broken / "mobius.json").read_text())["validation"]["passed"] is False


def assert_smoke_passes(package: Path, source: Path, monkeypatch, copy_to: Path) -> str:
    """Without torch (``reference_missing`` patched), a copy of ``package`` at ``copy_to``
    passes its smoke inference; returns the report's summary."""
    import mobius.validate

    monkeypatch.setattr(mobius.validate, "reference_missing", lambda *names: "torch")
    report = mobius.validate.validate_package(shutil.copytree(package, copy_to), source)
    assert report.reference is None and report.passed, report.summary()
    assert "smoke inference" in report.summary()
    return report.summary()
