"""MaskFormer's own Swin (``maskformer-swin``): the backbone transformers puts under MaskFormer
(``MaskFormerSwinBackbone``) and, registered on its own, its encoder ``MaskFormerSwinModel``.

It is Swin with always-full windows (a stage smaller than the window is padded to it; odd
blocks keep their shift), so the backbone is :mod:`._swin_any_size`'s under other names:
``model.embeddings``, ``model.encoder.layers.N`` and one LayerNorm per stage,
``hidden_states_norms.0``... (a checkpoint holds the norms of every stage; those of stages
not in ``out_features`` are unread, as are ``model.layernorm`` and the saved
``relative_position_index`` buffers). Refused in one line: ``stem`` in ``out_features``
(transformers refuses it too) and absolute position embeddings (transformers' table has one
row more than there are patches).

The encoder alone builds as ``mobius build --head none`` (``last_hidden_state``,
``pooler_output``; at the fixed size of the config, as :mod:`.swin`'s); transformers ships no
classifier for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from onnxscript import nn

from mobius.components import LayerNorm
from mobius.errors import ConfigError
from mobius_vision.models._backbone_config import StageNorms, stage_names
from mobius_vision.models._swin_any_size import (
    AnySizeSwinEmbeddings,
    AnySizeSwinStagesEncoder,
    channels_first,
)
from mobius_vision.models.swin import SwinBackboneConfig, SwinConfig, SwinForImageClassification

ABSOLUTE_REFUSED = (
    "use_absolute_embeddings is refused: transformers' table has one row more than there are "
    "patches and cannot be added to them"
)


@dataclass
class MaskFormerSwinConfig(SwinConfig):
    """The encoder alone: always-full windows, no absolute table, no classifier."""

    def refuse_unbuildable(self) -> None:
        self.require_no_head()
        if self.use_absolute_embeddings:
            raise ConfigError(f"{self.model_type}: {ABSOLUTE_REFUSED}")

    def window_and_shift(self, stage: int, block: int) -> tuple[int, int]:
        return self.window_size, self.window_size // 2 if block % 2 else 0


@dataclass
class MaskFormerSwinBackboneConfig(SwinBackboneConfig):
    backbone_type: ClassVar[str] = "maskformer-swin"

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        if "stem" in fields["out_features"]:
            raise ConfigError("maskformer-swin backbone: out_features cannot name the stem")
        if fields["use_absolute_embeddings"]:
            raise ConfigError(f"maskformer-swin backbone: {ABSOLUTE_REFUSED}")
        return fields


class MaskFormerSwinStages(nn.Module):
    """``MaskFormerSwinModel`` under the backbone: each stage's ``[batch, h, w, C]`` map
    before its patch merging (the final LayerNorm is unread)."""

    def __init__(self, config: MaskFormerSwinBackboneConfig) -> None:
        super().__init__()
        self.embeddings = AnySizeSwinEmbeddings(config)
        self.encoder = AnySizeSwinStagesEncoder(config)

    def forward(self, op, pixel_values) -> list:
        return self.encoder(op, self.embeddings(op, pixel_values))


class MaskFormerSwinBackbone(nn.Module):
    """transformers' ``MaskFormerSwinBackbone`` at any image size: ``feature_maps``
    ``[batch, C, h, w]``, one per ``out_features`` entry."""

    config_class = MaskFormerSwinBackboneConfig

    def __init__(self, config: MaskFormerSwinBackboneConfig) -> None:
        super().__init__()
        self.config = config
        stages = len(config.depths)
        self.model = MaskFormerSwinStages(config)
        self.used = [stage_names(stages).index(name) - 1 for name in config.out_features]
        norms = {str(i): LayerNorm(config.stage_dim(i)) for i in self.used}
        self.hidden_states_norms = StageNorms(norms)
        unused = sorted(set(range(stages)) - set(self.used))
        self.ignored = (
            "model.layernorm.*",
            "*.relative_position_index",
            *(f"hidden_states_norms.{i}.*" for i in unused),
        )

    def feature_channels(self) -> list[int]:
        return self.config.feature_channels()

    def forward(self, op, pixel_values) -> list:
        stages = self.model(op, pixel_values)
        normed = self.hidden_states_norms(op, {str(i): stages[i] for i in self.used})
        return channels_first(op, normed)


class MaskFormerSwinForImageClassification(SwinForImageClassification):
    """``MaskFormerSwinModel`` (``--head none``), and the backbone MaskFormer puts under itself."""

    config_class = MaskFormerSwinConfig
    base_model_prefix = "model"
    backbone_class = MaskFormerSwinBackbone

    @staticmethod
    def any_size_backbone_class() -> type:
        return MaskFormerSwinBackbone  # it takes any size already


MODEL_TYPES = {"maskformer-swin": MaskFormerSwinForImageClassification}
