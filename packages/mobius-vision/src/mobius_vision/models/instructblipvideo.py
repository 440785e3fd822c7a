"""InstructBLIP-Video: InstructBLIP over the frames of a video, one Q-Former pass per frame.

The checkpoint is InstructBLIP's (same tower, Q-Former and projection). What changes is
the input: ``pixel_values`` [videos, frames, channels, height, width]. Every frame goes
through the tower and the Q-Former on its own, each reading its video's instruction
(``qformer_input_ids``/``qformer_attention_mask``, one row per video, repeated for each
frame), and the frames' projected queries follow one another: ``frames *
num_query_tokens`` features per video. The placeholder is the config's
``video_token_index`` (transformers' processor puts ``4 * num_query_tokens`` of them
before the prompt: it samples four frames).
"""

from __future__ import annotations

import copy
from typing import Any

import onnx_ir as ir

from mobius_vision.models._vl import flatten_images
from mobius_vision.models.blip_2_vision import Blip2VisionModel
from mobius_vision.models.instructblip import (
    InstructBlipConfig,
    InstructBlipForConditionalGeneration,
)


class InstructBlipVideoConfig(InstructBlipConfig):
    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        # transformers' video config names its placeholder video_token_index and has no
        # image_token_index: read the one as the other.
        as_images = copy.deepcopy(hf_config)
        as_images.image_token_index = getattr(hf_config, "video_token_index", None)
        return super().hf_fields(as_images)


def per_frame(op, values, frames):
    """``values`` [videos, n] repeated for each frame: [videos * frames, n], frame-major
    within a video (transformers' ``repeat_interleave(frames, dim=0)``)."""
    videos = op.Shape(values, start=0, end=1)
    width = op.Shape(values, start=1, end=2)
    tiled = op.Expand(op.Unsqueeze(values, [1]), op.Concat(videos, frames, width, axis=0))
    return op.Reshape(tiled, op.Concat(op.Constant(value_ints=[-1]), width, axis=0))


class InstructBlipVideoForConditionalGeneration(InstructBlipForConditionalGeneration):
    config_class = InstructBlipVideoConfig

    def vision_inputs(self, dtype) -> list[tuple]:
        """``pixel_values`` of whole videos, then the instruction in the Q-Former's vocabulary,
        one per video."""
        height, width = self.config.vision.image_size
        channels = self.config.vision.num_channels
        text = ["num_videos", "qformer_sequence"]
        return [
            ("pixel_values", dtype, ["num_videos", "frames", channels, height, width]),
            ("qformer_input_ids", ir.DataType.INT64, text),
            ("qformer_attention_mask", ir.DataType.INT64, text),
        ]

    def image_features(self, op, pixel_values, qformer_input_ids, qformer_attention_mask):
        """``[videos * frames * num_query_tokens, text_hidden]``: each frame's queries in turn."""
        frames = op.Shape(pixel_values, start=1, end=2)
        image_shape = op.Concat(
            op.Constant(value_ints=[-1]), op.Shape(pixel_values, start=2), axis=0
        )
        states, _ = self.vision_tower(op, op.Reshape(pixel_values, image_shape))
        features = self.multi_modal_projector(
            op,
            states,  # [videos * frames, positions, vision_hidden]
            per_frame(op, qformer_input_ids, frames),
            per_frame(op, qformer_attention_mask, frames),
            pixel_values.dtype,
        )
        return flatten_images(op, features)


MODEL_TYPES = {
    "instructblipvideo": InstructBlipVideoForConditionalGeneration,
    "instructblipvideo_vision_model": Blip2VisionModel,  # InstructBLIP's tower
}
