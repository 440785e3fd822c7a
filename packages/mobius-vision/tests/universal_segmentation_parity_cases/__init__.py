"""Universal-segmentation parity cases, one module per family.

Each module defines ``CASES``: case name -> (model_type, config overrides, keyword arguments
of ``check_universal_segmentation_parity``: ``model_class``, the ``image_size``...).
"""

from __future__ import annotations

from .mask2former import CASES as MASK2FORMER
from .maskformer import CASES as MASKFORMER
from .oneformer import CASES as ONEFORMER

CASES: dict[str, tuple] = {**MASKFORMER, **MASK2FORMER, **ONEFORMER}
