"""Encoder–decoder parity cases of mobius-text, one module per architecture family.

Each module defines ``CASES``: case name -> (model_type, config overrides) or
(model_type, overrides, keyword arguments of ``check_seq2seq_parity``). There is
no shared TINY: encoder–decoder configs name their sizes in too many ways
(``d_model``/``d_ff``/``num_heads`` for T5, ``d_model``/``encoder_layers``... for
BART); each family module keeps its own small base. ``all_cases()`` merges them.
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
