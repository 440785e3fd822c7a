"""Qwen2.5-VL's base model over a prompt with images: its token states (Qwen-Image Edit's
text encoder).

transformers' ``Qwen2_5_VLModel`` (the ``.model`` of ``Qwen2_5_VLForConditionalGeneration``)
run once over the prompt, as a diffusion pipeline reads it: the vision tower encodes
``pixel_values`` / ``image_grid_thw`` (the processor's), its merged tokens replace the
prompt's ``<|image_pad|>`` embeddings in order, and the M-RoPE decoder runs without
cache or head over ``position_ids [3, batch, sequence]`` (the model's ``get_rope_index``,
which :meth:`mobius_vision.processing.qwen_vl.QwenVLProcessor.rope_positions` computes).
Outputs ``last_hidden_state`` (and the ``hidden_states.{i}`` of ``--hidden-states``),
as the text-only ``Qwen2_5_VLTextModel`` does.

Built from the whole ``Qwen2_5_VLForConditionalGeneration`` folder with ``--model-type
Qwen2_5_VLModel`` (a Qwen-Image Edit pipeline's build picks it): the tower is read under
``visual.`` (``model.visual.`` in transformers 5), the decoder under ``model.``, and
``lm_head`` ignored by name. The graph's contract is the ``image-text-encoder`` task's
(:mod:`mobius_vision.tasks.image_text_encoder`).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from mobius.components import merge_image_features, module_scope
from mobius.errors import ConfigError
from mobius_text.models.qwen2_vl_text import Qwen2VLTextConfig, Qwen2VLTextModel
from mobius_text.models.text_encoders import (
    DecoderTextEncoder,
    Qwen2_5_VLTextEncoder,
    TextEncoderFields,
)
from mobius_vision.models.qwen2_5_vl import Qwen2_5_VLVisionConfig, Qwen2_5_VLVisionTower


@dataclass
class Qwen2_5_VLModelConfig(TextEncoderFields, Qwen2VLTextConfig):
    """The text config's fields (M-RoPE's sections included), the tower's and the image token."""

    vision: Qwen2_5_VLVisionConfig | None = None
    image_token_id: int = 0

    @classmethod
    def hf_fields(cls, hf_config):
        text = getattr(hf_config, "text_config", None)
        vision = getattr(hf_config, "vision_config", None)
        if text is None or vision is None:
            raise ConfigError(
                f"Qwen2_5_VLModel builds a Qwen2.5-VL folder (text_config and vision_config); "
                f"this config is a {hf_config.model_type!r}"
            )
        image_token = getattr(hf_config, "image_token_id", None)
        if not isinstance(image_token, int) or isinstance(image_token, bool) or image_token < 0:
            raise ConfigError(f"image_token_id is {image_token!r}, not a token id")
        return dict(
            super().hf_fields(text),
            vision=Qwen2_5_VLVisionConfig.from_hf(vision),
            image_token_id=image_token,
        )


class Qwen2_5_VLModelTextEncoder(Qwen2_5_VLTextEncoder):
    """``visual`` (the tower and its merger) and ``model`` (the M-RoPE decoder), no head."""

    task = "image-text-encoder"
    config_class = Qwen2_5_VLModelConfig
    backbone_class = Qwen2VLTextModel
    ignored = DecoderTextEncoder.ignored  # lm_head only: the tower is read here

    def __init__(self, config: Qwen2_5_VLModelConfig) -> None:
        super().__init__(config)
        self.visual = Qwen2_5_VLVisionTower(config.vision)

    def image_inputs(self, dtype: ir.DataType) -> list[tuple]:
        """The processor's image inputs ``(name, dtype, shape)``: every image's patches, in order."""
        width = self.config.vision.patch_width
        return [
            ("pixel_values", dtype, ["num_patches", width]),
            ("image_grid_thw", ir.DataType.INT64, ["num_images", 3]),
        ]

    def position_ids_shape(self) -> list:
        return [3, "batch", "sequence"]  # M-RoPE's temporal, height and width streams

    def forward(self, op, input_ids, attention_mask, position_ids, pixel_values, image_grid_thw):
        features = self.visual(op, pixel_values, image_grid_thw)  # [image_tokens, hidden]
        with module_scope(op, self.model):  # the backbone's pieces keep their ``model.`` names
            embeds = self.model.embed_tokens(op, input_ids)  # [batch, seq, hidden]
            embeds = merge_image_features(
                op, embeds, input_ids, features, self.config.image_token_id
            )
            states = self.token_states(op, input_ids, attention_mask, embeds, position_ids)
        outputs = {"last_hidden_state": states[-1]}
        outputs.update({f"hidden_states.{i}": states[i] for i in self.config.hidden_states})
        return outputs


MODEL_TYPES = {"Qwen2_5_VLModel": Qwen2_5_VLModelTextEncoder}
