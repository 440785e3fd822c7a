"""Data2Vec-Vision: BEiT's architecture and keys under ``data2vec_vision.``.

The one difference: the bare ``Data2VecVisionModel`` has no pooler (no
``pooler_output``); the classifier still reads the pooler's output.
"""

from __future__ import annotations

from mobius_vision.models.beit import BeitConfig, BeitForImageClassification, BeitModel


class Data2VecVisionModel(BeitModel):
    bare_pooler = False


class Data2VecVisionForImageClassification(BeitForImageClassification):
    config_class = BeitConfig
    base_model_prefix = "data2vec_vision"
    model_class = Data2VecVisionModel


MODEL_TYPES = {"data2vec-vision": Data2VecVisionForImageClassification}
