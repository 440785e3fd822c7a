"""RT-DETR v2: RT-DETR (:mod:`.rt_detr`) whose deformable attention scales its box offsets by
``decoder_offset_scale`` and each point's own scale (``n_points_scale``, a checkpoint tensor:
``1 / points`` as transformers initialises it).

transformers' v2 keeps a per-level point count and a ``"discrete"`` sampling method; the
checkpoints' point counts are equal per level (``decoder_n_points``), which is what is
built, and ``decoder_method="discrete"`` is refused. With ``tie_word_embeddings`` off, a
checkpoint also holds the heads at the top level (``class_embed.N``, ``bbox_embed.N``), the
training copies of the decoder's: the graph reads ``model.decoder.*``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.errors import ConfigError
from mobius_vision.models._deformable import (
    MultiscaleDeformableAttention,
    point_scaled_box_locations,
)
from mobius_vision.models.rt_detr import (
    RTDetrConfig,
    RTDetrDecoder,
    RTDetrDecoderLayer,
    RTDetrForObjectDetection,
    RTDetrModel,
)

#: The heads' training copies at the top level of a checkpoint.
TOP_LEVEL_HEADS = ("class_embed.", "bbox_embed.")


@dataclass
class RTDetrV2Config(RTDetrConfig):
    decoder_offset_scale: float = 0.5

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        if hf_config.decoder_method != "default":
            raise ConfigError(
                f"rt_detr_v2: decoder_method {hf_config.decoder_method!r} is not supported "
                "(mobius builds the default bilinear sampling)"
            )
        if hf_config.decoder_n_levels != fields["num_feature_levels"]:
            raise ConfigError(
                f"rt_detr_v2: decoder_n_levels {hf_config.decoder_n_levels} differs from "
                f"num_feature_levels {fields['num_feature_levels']}"
            )
        scale = hf_config.decoder_offset_scale
        if not isinstance(scale, (int, float)) or scale <= 0:
            raise ConfigError(f"rt_detr_v2: decoder_offset_scale {scale!r} is not positive")
        return dict(fields, decoder_offset_scale=float(scale))


class RTDetrV2MultiscaleDeformableAttention(MultiscaleDeformableAttention):
    """Box offsets times ``n_points_scale`` (one per level and point) and ``offset_scale``."""

    def __init__(self, config: RTDetrV2Config) -> None:
        super().__init__(
            config.d_model,
            config.decoder_attention_heads,
            config.num_feature_levels,
            config.decoder_n_points,
            box_references=True,
        )
        self.offset_scale = config.decoder_offset_scale
        self.n_points_scale = nn.Parameter([config.num_feature_levels * config.decoder_n_points])

    def box_locations(self, op, reference, offsets):
        return point_scaled_box_locations(
            op,
            reference,
            offsets,
            self.n_points_scale,
            self.num_levels,
            self.num_points,
            self.offset_scale,
        )


class RTDetrV2DecoderLayer(RTDetrDecoderLayer):
    def cross_attention(self, config: RTDetrV2Config):
        return RTDetrV2MultiscaleDeformableAttention(config)


class RTDetrV2Decoder(RTDetrDecoder):
    layer_class = RTDetrV2DecoderLayer


class RTDetrV2Model(RTDetrModel):
    decoder_class = RTDetrV2Decoder


class RTDetrV2ForObjectDetection(RTDetrForObjectDetection):
    config_class = RTDetrV2Config
    model_class = RTDetrV2Model

    def sanitize(self, weights: dict) -> dict:
        """The top-level heads fill the decoder's where a checkpoint holds only them; else
        they are dropped (the decoder's are the ones the model runs)."""
        kept = {}
        for name, value in weights.items():
            if name.startswith(TOP_LEVEL_HEADS):
                decoder_name = f"model.decoder.{name}"
                if decoder_name not in weights:
                    kept[decoder_name] = value
                continue
            kept[name] = value
        return kept


MODEL_TYPES = {"rt_detr_v2": RTDetrV2ForObjectDetection}
