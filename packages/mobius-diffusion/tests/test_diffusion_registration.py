"""mobius-diffusion registers each component class once, with a task and a parity test."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import mobius_diffusion
from mobius import registry
from mobius.tasks import TASKS

PACKAGE_DIR = Path(__file__).resolve().parents[1]


def _support_script():
    spec = importlib.util.spec_from_file_location(
        "diffusion_support_table", PACKAGE_DIR / "scripts" / "support_table.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_model_files_import():
    assert mobius_diffusion.LOAD_ERRORS == {}


def test_every_registered_class_has_a_parity_test():
    """support_table.py maps each class to its parity test; that test file must exist and hold it."""
    kits = {
        cls: (task, file, test)
        for task, _heading, _covers, table in _support_script().KITS
        for cls, (file, test) in table.items()
    }
    for key, module in mobius_diffusion.model_types().items():
        assert key in kits, f"{key} has no parity test listed in scripts/support_table.py"
        task, file, test = kits[key]
        assert module.task == task, f"{key} is a {module.task} model, listed under {task}"
        source = (PACKAGE_DIR / "tests" / file).read_text(encoding="utf-8")
        assert f"def {test}(" in source, f"{file} has no {test}"


def test_registered_through_the_plugin():
    for key, module in mobius_diffusion.model_types().items():
        entry = registry.get(key)
        assert entry.package == "mobius-diffusion"
        assert entry.task == module.task and module.task in TASKS
