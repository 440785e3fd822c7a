"""Depth-estimation parity cases of mobius-vision, one module per family group.

Each module defines ``CASES``: case name -> (model_type, config overrides, keyword
arguments of ``check_depth_parity``: at least the ``image_size`` to run). ``all_cases()``
merges them; a name used twice is an error.
"""

from __future__ import annotations

from mobius.testing import collect_cases


def all_cases() -> dict[str, tuple]:
    return collect_cases(__name__, __path__)
