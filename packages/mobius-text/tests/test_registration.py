"""mobius-text's registration: discovery of model files, and isolation of a broken one."""

from __future__ import annotations

import subprocess
import sys

import pytest

import mobius_text
from mobius import Registry
from mobius.discovery import register_model_types
from mobius.errors import UnknownModelTypeError


def test_every_model_file_imports():
    mobius_text.model_types()
    assert mobius_text.LOAD_ERRORS == {}


def test_a_broken_model_file_is_reported_and_hides_nothing_else(monkeypatch, tmp_path):
    """Discovery (what the index is written from) records a broken file and finds the rest."""
    models_dir = tmp_path / "extra"
    models_dir.mkdir()
    (models_dir / "zz_broken.py").write_text("raise RuntimeError('half-written file')\n")
    monkeypatch.setattr(
        mobius_text.models, "__path__", [*mobius_text.models.__path__, str(models_dir)]
    )
    monkeypatch.setattr(mobius_text, "LOAD_ERRORS", {})
    monkeypatch.delitem(sys.modules, "mobius_text.models.zz_broken", raising=False)

    table = mobius_text.model_types()
    assert "llama" in table
    assert "half-written file" in mobius_text.LOAD_ERRORS["zz_broken"]

    reg = Registry(discover=False)
    register_model_types(reg, "mobius-text", table, mobius_text.LOAD_ERRORS)
    assert "llama" in reg
    with pytest.raises(UnknownModelTypeError, match="models/zz_broken.py"):
        reg.get("not_a_model")


def test_registering_reads_the_index_and_imports_no_model_file():
    """register() takes the keys from registrations.json: the model files load on use."""
    code = (
        "import sys; from mobius import Registry; import mobius_text; "
        "r = Registry(discover=False); mobius_text.register(r); "
        "assert 'llama' in r; "
        "assert not [m for m in sys.modules if m.startswith('mobius_text.models.')], 'imported'; "
        "assert r.get('llama').module_class().__name__"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
