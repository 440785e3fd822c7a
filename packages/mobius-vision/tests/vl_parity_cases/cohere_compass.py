"""Cohere Compass: Qwen3-VL's tower and DeepStack over a Cohere Compass decoder.

The real ``CohereCompassProcessor`` (Qwen3-VL's, with ``<|IMAGE_PAD|>`` between
``<|VISION_START|>`` and ``<|VISION_END|>``) over the PIL image processor: two image
sizes resample the learned 3x3 position table. The decoder alternates sliding layers
(window 12, shorter than the prompts) rotated by interleaved M-RoPE (theta 1000,
section [2, 3, 3] of head_dim 16) with full layers without RoPE, as Cohere2 does;
DeepStack levels come from blocks out of order; the logits are scaled by 0.5.
Positions are the model's own ``get_rope_index``.
"""

from transformers.models.cohere_compass.processing_cohere_compass import CohereCompassProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
    Qwen2VLImageProcessorPil,
)

from mobius.testing import tiny_tokenizer
from vl_parity_cases._tiny import VideoProcessorOptional
from vl_parity_cases.qwen2_vl import END, IMAGE, OPTIONS, START, VIDEO, out_hidden_config
from vl_parity_cases.qwen3_vl import VISION

#: Qwen-VL's special tokens at the same ids, under Cohere Compass's names
SPECIAL_TOKENS = {"<|IMAGE_PAD|>": IMAGE, "<|VISION_START|>": START, "<|VISION_END|>": END}
SPECIAL_TOKENS["<|VIDEO_PAD|>"] = VIDEO
IMG = "<|VISION_START|> <|IMAGE_PAD|> <|VISION_END|>"
PROMPTS = (f"USER: {IMG} w11 w7 w9 ASSISTANT:", f"USER: w8 {IMG} w2 ASSISTANT: w10")
TEXT = dict(
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=96,
    max_position_embeddings=256,
    layer_types=["sliding_attention", "full_attention"] * 2,
    sliding_window=12,
    rope_parameters={
        "sliding_attention": {
            "rope_type": "default",
            "rope_theta": 1000.0,
            "mrope_section": [2, 3, 3],
        },
        "full_attention": None,
    },
    logit_scale=0.5,
)


class ImageCohereCompassProcessor(VideoProcessorOptional, CohereCompassProcessor):
    """CohereCompassProcessor over images only."""


def cohere_compass_processor(config):
    """The processor over the PIL image processor (the qwen2_vl cases' sizes) and a tiny
    tokenizer holding Cohere Compass's special tokens."""
    vision = config.vision_config
    image_processor = Qwen2VLImageProcessorPil(
        min_pixels=16 * 16,
        max_pixels=48 * 48,
        patch_size=vision.patch_size,
        temporal_patch_size=vision.temporal_patch_size,
        merge_size=vision.spatial_merge_size,
    )
    tokenizer = tiny_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS)
    processor = ImageCohereCompassProcessor(image_processor=image_processor, tokenizer=tokenizer)
    assert processor.image_token_id == IMAGE
    return processor


def cohere_compass_config(**overrides):
    return out_hidden_config("cohere_compass", VISION, TEXT, **overrides)


CASES = {
    "cohere_compass-deepstack-sliding-nope": (
        "cohere_compass",
        cohere_compass_config(),
        cohere_compass_processor,
        dict(OPTIONS, prompts=PROMPTS),
    ),
}
