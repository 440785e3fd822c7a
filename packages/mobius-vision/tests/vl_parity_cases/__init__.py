"""Vision–language parity cases of mobius-vision, one module per family.

Each module defines ``CASES``: case name -> (model_type, make_config, make_processor),
where ``make_config()`` returns the transformers config and ``make_processor(config)``
the family's real processor over a tiny tokenizer. ``all_cases()`` merges them;
``_tiny`` holds the towers and decoders most families share.
"""

from __future__ import annotations

import importlib
import pkgutil


def all_cases() -> dict[str, tuple]:
    cases: dict[str, tuple] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):  # shared pieces, not a family
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name, case in module.CASES.items():
            if name in cases:
                raise ValueError(f"parity case {name!r} is defined twice (in {info.name})")
            cases[name] = case
    return cases
