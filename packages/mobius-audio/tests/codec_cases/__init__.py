"""Codec parity cases: each module maps a case name to ``(model_type, config overrides,
feature-extractor class, its kwargs[, check_codec_parity options])``."""

from __future__ import annotations

import importlib
import pkgutil


def all_cases() -> dict[str, tuple]:
    """Every case of every module in this package."""
    cases = {}
    for info in pkgutil.iter_modules(__path__):
        cases.update(importlib.import_module(f"{__name__}.{info.name}").CASES)
    return cases
