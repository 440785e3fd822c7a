"""DETR: a ResNet (or any registered backbone) under a transformer encoder–decoder over 100
object queries, softmax class logits with a last "no object" class, sigmoid boxes.

The layers are in :mod:`._detr`, shared with DETR's variants.
"""

from __future__ import annotations

from mobius_vision.models._detr import DetrForObjectDetection

MODEL_TYPES = {"detr": DetrForObjectDetection}
