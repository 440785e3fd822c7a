"""Qwen2-VL: two images of different sizes in one batch, M-RoPE positions, untied and tied heads.

The real ``Qwen2VLProcessor`` (its PIL image processor) resizes each image to multiples of
``patch_size * merge_size`` within ``[min_pixels, max_pixels]`` and flattens it into
``[patches, 3 * 2 * 4 * 4]`` rows; with 4-pixel patches and merge 2, 37x45 becomes 40x48
(a 10x12 grid, 30 image tokens) and 29x21 becomes 32x24 (8x6, 12 tokens). Positions are
the 3-D rope indices the model's own ``get_rope_index`` computes, and decode steps add its
``rope_deltas`` (the kit's ``rope_positions``).
"""

from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
    Qwen2VLImageProcessorPil,
)
from transformers.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor

from mobius.testing import tiny_tokenizer

from ._tiny import VideoProcessorOptional, vl_config

IMAGE, START, END, VIDEO = 3, 4, 5, 6
SPECIAL_TOKENS = {"<|image_pad|>": IMAGE, "<|vision_start|>": START, "<|vision_end|>": END}
SPECIAL_TOKENS["<|video_pad|>"] = VIDEO
IMG = "<|vision_start|> <|image_pad|> <|vision_end|>"
PROMPTS = (f"USER: {IMG} w11 w7 w9 ASSISTANT:", f"USER: w8 {IMG} w2 ASSISTANT: w10")
VISION = dict(
    depth=2,
    embed_dim=32,
    num_heads=2,
    mlp_ratio=2,
    patch_size=4,
    spatial_merge_size=2,
    temporal_patch_size=2,
)
TEXT = dict(
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=96,
    max_position_embeddings=256,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
)


def qwen2_vl_config(model_type="qwen2_vl", vision=VISION, text=TEXT, **overrides):
    return vl_config(
        model_type,
        dict({"hidden_size": text["hidden_size"]}, **vision),
        text,
        image_token_id=IMAGE,
        video_token_id=VIDEO,
        vision_start_token_id=START,
        vision_end_token_id=END,
        **overrides,
    )


def out_hidden_config(model_type: str, vision: dict, text: dict, **overrides):
    """Qwen2.5-VL's and later configs: the tower's width is its ``hidden_size``; the merger
    writes ``out_hidden_size`` (the decoder's)."""
    vision = dict(vision, out_hidden_size=text["hidden_size"])
    return qwen2_vl_config(model_type, vision, text, **overrides)


class ImageQwen2VLProcessor(VideoProcessorOptional, Qwen2VLProcessor):
    """Qwen2VLProcessor over images only."""


def qwen2_vl_processor(config, processor_class=ImageQwen2VLProcessor):
    """``processor_class`` (a Qwen-VL processor) over the PIL image processor and a tiny tokenizer."""
    vision = config.vision_config
    image_processor = Qwen2VLImageProcessorPil(
        min_pixels=16 * 16,
        max_pixels=48 * 48,
        patch_size=vision.patch_size,
        temporal_patch_size=vision.temporal_patch_size,
        merge_size=vision.spatial_merge_size,
    )
    tokenizer = tiny_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS)
    return processor_class(image_processor=image_processor, tokenizer=tokenizer)


def rope_positions(model, inputs):
    """The model's own 3-D rope indices and deltas for the processor's ``inputs``."""
    import torch

    positions, deltas = model.model.get_rope_index(
        torch.from_numpy(inputs["input_ids"]),
        mm_token_type_ids=torch.from_numpy(inputs["mm_token_type_ids"]),
        image_grid_thw=torch.from_numpy(inputs["image_grid_thw"]),
        attention_mask=torch.from_numpy(inputs["attention_mask"]),
    )
    return positions.numpy(), deltas.numpy()


OPTIONS = dict(prompts=PROMPTS, image_sizes=((37, 45), (29, 21)), rope_positions=rope_positions)

# sliding-window layers after the first (transformers' max_window_layers), a window the
# prompts outgrow; merge 1 (every patch a token), silu, a tied head, one image per prompt
SLIDING = dict(TEXT, use_sliding_window=True, sliding_window=12, max_window_layers=1)

CASES = {
    "qwen2_vl-two-sizes": ("qwen2_vl", qwen2_vl_config(), qwen2_vl_processor, OPTIONS),
    "qwen2_vl-merge-1-silu-tied-sliding": (
        "qwen2_vl",
        qwen2_vl_config(
            vision=dict(VISION, spatial_merge_size=1, hidden_act="silu", depth=3, mlp_ratio=3),
            text=SLIDING,
            tie_word_embeddings=True,
        ),
        qwen2_vl_processor,
        dict(OPTIONS, image_sizes=((21, 29), (13, 17))),
    ),
}
