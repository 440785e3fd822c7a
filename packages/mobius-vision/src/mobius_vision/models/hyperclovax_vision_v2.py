"""HyperCLOVA X SEED Vision (V2): Qwen2.5-VL's tower, a linear projector, HyperCLOVA X's decoder.

transformers' ``HyperCLOVAXVisionV2ForConditionalGeneration``: the ``qwen2_5_vl_vision``
tower (``model.vision_model``, with its window attention and patch merger) over the
processor's flattened patches and ``image_grid_thw``, then ``model.projector`` (one
biased Linear from the merger's ``out_hidden_size`` to the decoder's width), into
mobius-text's ``hyperclovax`` decoder. Positions are plain 1-D (no M-RoPE).

Two things of HyperCLOVA X's µP multipliers reach the composition: the decoder scales
whatever embeddings it is given by ``embedding_multiplier`` (image features included),
and the VL head multiplies the logits by ``logits_scaling`` as the text-only head does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear
from mobius_vision.models.qwen2_5_vl import Qwen2_5_VLVisionConfig, Qwen2_5_VLVisionTower
from mobius_vision.models.video_llama_3 import (
    VideoLlama3Config,
    VideoLlama3ForConditionalGeneration,
)


@dataclass
class HyperCLOVAXVisionV2Config(VideoLlama3Config):
    vision_config_class: ClassVar[type] = Qwen2_5_VLVisionConfig
    #: the VL head multiplies the logits as HyperCLOVA X's own head does
    text_head_applied: ClassVar[tuple[str, ...]] = ("logits_scaling",)


class HyperCLOVAXVisionV2ForConditionalGeneration(VideoLlama3ForConditionalGeneration):
    """VideoLLaMA3's composition (as transformers builds it) with Qwen2.5-VL's tower and a
    Linear projector."""

    config_class = HyperCLOVAXVisionV2Config
    tower_class = Qwen2_5_VLVisionTower

    #: the hub's layout (the decoder nested whole, head included, under
    #: ``model.language_model``; ``vision_projector``), then transformers' own
    renames = {
        "model.language_model.model.": "language_model.model.",
        "model.language_model.lm_head.": "language_model.lm_head.",
        "model.language_model.": "language_model.model.",
        "model.vision_model.": "vision_tower.",
        "model.vision_projector.": "multi_modal_projector.",
        "model.projector.": "multi_modal_projector.",
        "lm_head.": "language_model.lm_head.",
    }

    def make_projector(self, config: HyperCLOVAXVisionV2Config) -> nn.Module:
        # the tower's hidden_size is its merger's output (out_hidden_size)
        return Linear(config.vision.hidden_size, config.text.hidden_size, bias=True)

    def embed(self, op, input_ids, image_features):
        """The decoder's scaled token embeddings, the image features scaled alike: transformers
        scales the merged embeddings by ``embedding_multiplier`` inside the decoder."""
        scale = op.Constant(value=ir.tensor(float(self.config.text.embedding_multiplier)))
        scaled = op.Mul(image_features, op.CastLike(scale, image_features))
        return super().embed(op, input_ids, scaled)


MODEL_TYPES = {"hyperclovax_vision_v2": HyperCLOVAXVisionV2ForConditionalGeneration}
