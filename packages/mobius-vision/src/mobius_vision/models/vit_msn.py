"""ViT-MSN: ViT pre-trained with masked siamese networks; no pooler, the class token classified.

Checkpoints keep ViT's keys under ``vit.`` (transformers 5 saves a classifier's
encoder layers without the prefix; :meth:`sanitize` adds it back).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mobius_vision.models.vit import ViTConfig, ViTForImageClassification


@dataclass
class ViTMSNConfig(ViTConfig):
    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        return dict(super().hf_fields(hf_config), pooler=False)  # ViTMSNModel has no pooler


class ViTMSNForImageClassification(ViTForImageClassification):
    config_class = ViTMSNConfig


MODEL_TYPES = {"vit_msn": ViTMSNForImageClassification}
