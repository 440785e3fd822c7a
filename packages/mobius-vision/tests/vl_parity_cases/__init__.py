"""Vision–language parity cases of mobius-vision, one module per family.

Each module defines ``CASES``: case name -> (model_type, make_config, make_processor),
where ``make_config()`` returns the transformers config and ``make_processor(config)``
the family's real processor over a tiny tokenizer. ``all_cases()`` merges them;
``_tiny`` holds the towers and decoders most families share.
"""

from __future__ import annotations

from mobius.testing import collect_cases


def all_cases() -> dict[str, tuple]:
    return collect_cases(__name__, __path__)
