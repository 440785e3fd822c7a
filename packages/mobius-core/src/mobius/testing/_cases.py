"""Parity case tables kept one module per family in a test package."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable


def collect_cases(package: str, path: Iterable[str], table: str = "CASES") -> dict[str, tuple]:
    """Every module's ``table`` in the test package ``package`` (its ``__name__`` and
    ``__path__``), merged into one dict; a case name used twice is an error. Modules whose
    name starts with ``_`` hold shared pieces and are skipped; a module without ``table``
    adds nothing."""
    cases: dict[str, tuple] = {}
    for info in pkgutil.iter_modules(path):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        for name, case in getattr(module, table, {}).items():
            if name in cases:
                raise ValueError(f"parity case {name!r} is defined twice (in {info.name})")
            cases[name] = case
    return cases
