"""Donut Swin: the Swin encoder of Donut, without the final LayerNorm.

Checkpoint keys are Swin's under ``donut.``; they also carry each window's
``relative_position_index`` (a persistent buffer there), which the graph recomputes.
"""

from __future__ import annotations

from dataclasses import dataclass

from mobius.errors import ConfigError
from mobius_vision.models.swin import SwinConfig, SwinForImageClassification, SwinModel


@dataclass
class DonutSwinConfig(SwinConfig):
    def refuse_unbuildable(self) -> None:
        if self.use_absolute_embeddings:
            raise ConfigError(
                f"{self.model_type}: use_absolute_embeddings is refused: transformers' table has "
                "one row more than there are patches and cannot be added to them"
            )
        super().refuse_unbuildable()


class DonutSwinModel(SwinModel):
    final_norm = False  # last_hidden_state and the pooled mean are the last stage's own


class DonutSwinForImageClassification(SwinForImageClassification):
    config_class = DonutSwinConfig
    model_class = DonutSwinModel
    base_model_prefix = "donut"


MODEL_TYPES = {"donut-swin": DonutSwinForImageClassification}
