"""Mask-generation parity cases (Segment Anything families), one module per family.

Each module defines ``CASES``: case name -> (model_type, config overrides, keyword
arguments of :func:`~mobius_vision.testing.check_mask_generation_parity`). ``all_cases()``
merges them; a name used twice is an error.
"""

from __future__ import annotations

from mobius.testing import collect_cases


def all_cases() -> dict[str, tuple]:
    return collect_cases(__name__, __path__)
