"""PaddleOCR-VL: its rotary tower with a learned 3x3 position table resampled (half-pixel
centres) to two image sizes in one batch, the 2x2 patch-merging projector, and the ERNIE 4.5
decoder with biases everywhere and M-RoPE positions from the model's ``get_rope_index``.

The real ``PaddleOCRVLProcessor`` over ``PaddleOCRVLImageProcessorPil``: with 4-pixel
patches and merge 2, 37x45 becomes 40x48 (a 10x12 grid, 30 image tokens) and 29x21
becomes 32x24 (8x6, 12 tokens).
"""

from transformers.models.paddleocr_vl.image_processing_pil_paddleocr_vl import (
    PaddleOCRVLImageProcessorPil,
)
from transformers.models.paddleocr_vl.processing_paddleocr_vl import PaddleOCRVLProcessor

from mobius.testing import tiny_tokenizer

from ._tiny import vl_config
from .qwen2_vl import END, IMAGE, PROMPTS, SPECIAL_TOKENS, START, VIDEO, rope_positions
from .qwen2_vl import TEXT as QWEN2_VL_TEXT

VISION = dict(
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=2,
    image_size=12,  # a 3x3 position table
    patch_size=4,
    spatial_merge_size=2,
)
# Qwen2-VL's tiny M-RoPE decoder (head_dim 16, sections [2, 3, 3]) with ERNIE's biases
TEXT = dict(QWEN2_VL_TEXT, head_dim=16, use_bias=True)


def paddleocr_vl_processor(config):
    image_processor = PaddleOCRVLImageProcessorPil(
        min_pixels=16 * 16, max_pixels=48 * 48, patch_size=4, merge_size=2
    )
    tokenizer = tiny_tokenizer(
        config.text_config.vocab_size, SPECIAL_TOKENS, {"image_token": "<|image_pad|>"}
    )
    return PaddleOCRVLProcessor(image_processor=image_processor, tokenizer=tokenizer)


CASES = {
    "paddleocr_vl-two-sizes": (
        "paddleocr_vl",
        vl_config(
            "paddleocr_vl",
            VISION,
            TEXT,
            image_token_id=IMAGE,
            video_token_id=VIDEO,
            vision_start_token_id=START,
            vision_end_token_id=END,
        ),
        paddleocr_vl_processor,
        dict(prompts=PROMPTS, image_sizes=((37, 45), (29, 21)), rope_positions=rope_positions),
    ),
}
