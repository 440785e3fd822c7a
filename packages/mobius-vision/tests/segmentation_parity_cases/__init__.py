"""Segmentation parity cases of mobius-vision, one module per family group.

Each module defines ``CASES``: case name -> (model_type, config overrides) or
(model_type, overrides, keyword arguments of ``check_semantic_segmentation_parity``:
the ``image_size`` the case is built at...), and ``BACKBONE_CASES`` (the dense backbones it
needs, checked against transformers' ``AutoBackbone``). ``all_cases()`` merges them; a
name used twice is an error.
"""

from __future__ import annotations

from mobius.testing import collect_cases


def all_cases(table: str = "CASES") -> dict[str, tuple]:
    """Every module's ``table`` (``CASES`` or ``BACKBONE_CASES``), merged."""
    return collect_cases(__name__, __path__, table)
