"""Audio-encoder parity cases of mobius-audio, one module per architecture family.

Each module defines ``CASES``: case name -> (model_type, config overrides) or
(model_type, overrides, keyword arguments of ``check_audio_parity``, such as the
``heads`` the family has). ``all_cases()`` merges them; a name used twice is an error.
"""

from __future__ import annotations

import importlib
import pkgutil


def all_cases() -> dict[str, tuple]:
    cases: dict[str, tuple] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name, case in module.CASES.items():
            if name in cases:
                raise ValueError(f"parity case {name!r} is defined twice (in {info.name})")
            cases[name] = case
    return cases
