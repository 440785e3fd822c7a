"""The placeholder merge and embeddings handed in, now core's (:mod:`mobius.components._compose`).

Kept under this name for the vision families that import it from here.
"""

from __future__ import annotations

from mobius.components import embeddings_given, merge_image_features
from mobius.components import module_path as _module_path

__all__ = ["_module_path", "embeddings_given", "merge_image_features"]
