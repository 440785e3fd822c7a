"""InstructBLIP: BLIP-2 whose Q-Former also reads the instruction.

The processor tokenizes the prompt twice: for the decoder (after ``num_query_tokens``
image tokens, as BLIP-2), and with the Q-Former's own BERT tokenizer as
``qformer_input_ids``/``qformer_attention_mask``. The vision graph takes those beside
``pixel_values`` (one instruction per image); in the Q-Former the instruction's tokens
join the queries' self-attention, and only the queries' states are projected.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.components import InstructBlipQFormerModel
from mobius_vision.models._vl import flatten_images
from mobius_vision.models.blip_2 import Blip2Config, Blip2ForConditionalGeneration, Blip2Projector


class InstructBlipConfig(Blip2Config):
    qformer_text_input = True


class InstructBlipProjector(Blip2Projector):
    qformer_class = InstructBlipQFormerModel

    def forward(self, op, image_states, input_ids, attention_mask, dtype):
        queries = self.qformer(
            op,
            self.queries(op, image_states),
            image_states,
            self.num_queries,
            input_ids,
            attention_mask,
            dtype,
        )
        return self.language_projection(op, queries)


class InstructBlipForConditionalGeneration(Blip2ForConditionalGeneration):
    config_class = InstructBlipConfig
    projector_class = InstructBlipProjector

    def vision_inputs(self, dtype) -> list[tuple]:
        """``pixel_values``, then the instruction in the Q-Former's vocabulary, one per image."""
        text = ["num_images", "qformer_sequence"]
        return [
            *super().vision_inputs(dtype),
            ("qformer_input_ids", ir.DataType.INT64, text),
            ("qformer_attention_mask", ir.DataType.INT64, text),
        ]

    def image_features(self, op, pixel_values, qformer_input_ids, qformer_attention_mask):
        states, _ = self.vision_tower(op, pixel_values)  # [images, positions, vision_hidden]
        features = self.multi_modal_projector(
            op, states, qformer_input_ids, qformer_attention_mask, pixel_values.dtype
        )
        return flatten_images(op, features)

    @property
    def ignored(self) -> tuple[str, ...]:
        # the last layer's text states are never read: its text feed-forward block is unused
        last = self.config.qformer.num_hidden_layers - 1
        layer = f"multi_modal_projector.qformer.encoder.layer.{last}"
        return (*super().ignored, f"{layer}.intermediate.*", f"{layer}.output.*")


MODEL_TYPES = {"instructblip": InstructBlipForConditionalGeneration}
