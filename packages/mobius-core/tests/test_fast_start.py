"""``mobius --help``, ``--version`` and ``list`` start without importing anything heavy.

Checked with ``python -X importtime``, which lists every module a process
imports: none of the libraries that cost seconds (onnx_ir pulls in onnx and
sympy; transformers; numpy; torch) may appear. ``mobius build --help`` loads the
domain packages' registrations (their indexes, not their model files), so it is
held to the same list. Wall time is measured by benchmarks/cli_start.py, not here.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("onnx_ir", "onnx", "onnxscript", "sympy", "numpy", "transformers", "torch")


def imported_modules(*args: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "mobius", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return {line.split("|")[-1].strip() for line in result.stderr.splitlines() if "|" in line}


@pytest.mark.parametrize(
    "args", [("--help",), ("--version",), ("list",), ("build", "--help"), ("generate", "--help")]
)
def test_command_imports_nothing_heavy(args):
    modules = imported_modules(*args)
    assert "mobius.cli" in modules  # the measurement sees mobius's own imports
    assert [name for name in HEAVY if name in modules] == []


def test_a_build_does_import_them(tmp_path):
    """The check is not vacuous: ``mobius info`` on a model needs onnx_ir, and the list shows it."""
    from mobius_text.testing import write_tiny_llama

    source = write_tiny_llama(tmp_path / "llama")
    assert "onnx_ir" in imported_modules("info", str(source))
