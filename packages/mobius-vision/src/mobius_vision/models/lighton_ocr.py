"""LightOnOCR (``lighton_ocr``): Mistral 3's design under other names, over Qwen3 on the hub.

Pixtral's tower, whole (its ``last_hidden_state``), then Mistral 3's projector: RMS norm,
the ``spatial_merge_size`` patch merger, ``linear_1 -> GELU -> linear_2``, all bias-free.
The config carries none of Mistral 3's projector settings (transformers fixes them), and
the checkpoint names the tower ``vision_encoder`` and the projector ``vision_projection``.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

from mobius_vision.models._vl import VisionLanguageModel
from mobius_vision.models.mistral3 import Mistral3Config, Mistral3ForConditionalGeneration

#: The projector settings of Mistral 3's config that transformers' LightOnOCR classes fix.
FIXED_PROJECTOR = dict(
    vision_feature_layer=-1, projector_hidden_act="gelu", multimodal_projector_bias=False
)


class LightOnOcrConfig(Mistral3Config):
    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        # Mistral 3's reader, over a copy that holds the fixed settings
        view = copy.copy(hf_config)
        for name, value in FIXED_PROJECTOR.items():
            setattr(view, name, value)
        return super().hf_fields(view)


class LightOnOcrForConditionalGeneration(Mistral3ForConditionalGeneration):
    """Pixtral's tower, Mistral 3's merging projector (fixed settings), the text decoder."""

    config_class = LightOnOcrConfig
    renames: ClassVar[dict[str, str]] = {
        "model.vision_encoder.": "vision_tower.",
        "model.vision_projection.": "multi_modal_projector.",
        **VisionLanguageModel.renames,
    }


MODEL_TYPES = {"lighton_ocr": LightOnOcrForConditionalGeneration}
