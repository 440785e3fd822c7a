"""Text-prompted segmentation parity cases of mobius-vision, one module per family.

Each module defines ``CASES``: case name -> (model_type, config overrides) or
(model_type, overrides, keyword arguments of ``check_text_prompted_segmentation_parity``,
such as ``image_size``). ``all_cases()`` merges them; a name used twice is an error;
modules whose name starts with ``_`` hold shared pieces.
"""

from __future__ import annotations

from mobius.testing import collect_cases


def all_cases() -> dict[str, tuple]:
    return collect_cases(__name__, __path__)
