"""mobius-text's registration: discovery of model files, and isolation of a broken one."""

from __future__ import annotations

import sys

import pytest

import mobius_text
from mobius import Registry
from mobius.errors import UnknownModelTypeError


def test_every_model_file_imports():
    mobius_text.model_types()
    assert mobius_text.LOAD_ERRORS == {}


def test_a_broken_model_file_is_reported_and_hides_nothing_else(monkeypatch, tmp_path):
    models_dir = tmp_path / "extra"
    models_dir.mkdir()
    (models_dir / "zz_broken.py").write_text("raise RuntimeError('half-written file')\n")
    monkeypatch.setattr(
        mobius_text.models, "__path__", [*mobius_text.models.__path__, str(models_dir)]
    )
    monkeypatch.setattr(mobius_text, "LOAD_ERRORS", {})
    monkeypatch.delitem(sys.modules, "mobius_text.models.zz_broken", raising=False)

    reg = Registry(discover=False)
    mobius_text.register(reg)
    assert "llama" in reg
    assert "zz_broken" in mobius_text.LOAD_ERRORS
    with pytest.raises(UnknownModelTypeError, match="models/zz_broken.py"):
        reg.get("not_a_model")
