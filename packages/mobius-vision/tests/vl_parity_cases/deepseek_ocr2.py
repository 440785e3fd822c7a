"""DeepSeek-OCR 2 over its DeepSeek-V2-experts decoder: a global view and local tiles per image.

The hub's geometry at a patch of one pixel: the global view is the SAM tower's 64-pixel
square (a 64x64 grid, halved twice to 16x16 cells: the 16x16 query table), tiles are 48
pixels (48x48, 12x12 cells: the 12x12 table), so the tiles' position table and the global
layer's relative tables are resized; windows of 10 pad both grids. Of the two images, the
40x40 one fits a tile (no tiles) and the 50x100 one is cut into two: the processor writes
16^2 (+ 2 * 12^2) + 1 tokens (``patch_size`` 1, ``downsample_ratio`` 4). The decoder has a
dense layer, then routed and shared experts.
"""

from transformers import AutoConfig, DeepseekOcr2Processor
from transformers.models.deepseek_ocr2.image_processing_pil_deepseek_ocr2 import (
    DeepseekOcr2ImageProcessorPil,
)

from mobius.testing import tiny_tokenizer

from ._tiny import TEXT

IMAGE_TOKEN_ID = 3
SAM = dict(
    hidden_size=16,
    output_channels=8,
    num_hidden_layers=2,
    num_attention_heads=1,
    image_size=64,
    patch_size=1,
    mlp_dim=24,
    window_size=10,
    global_attn_indexes=[1],
    downsample_channels=[12, 32],
)
ENCODER = dict(
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
)
DECODER = dict(
    TEXT,
    max_position_embeddings=1024,  # a prompt with a tiled image holds 438 tokens
    mlp_layer_types=["dense", "sparse"],
    n_routed_experts=4,
    num_experts_per_tok=2,
    n_shared_experts=1,
    moe_intermediate_size=16,
    routed_scaling_factor=1.5,
)


def deepseek_ocr2_config():
    return AutoConfig.for_model(
        "deepseek_ocr2",
        vision_config=dict(sam_config=dict(SAM), encoder_config=dict(ENCODER)),
        text_config=dict(DECODER),
        image_token_id=IMAGE_TOKEN_ID,
    )


def deepseek_ocr2_processor(config):
    size = config.vision_config.sam_config.image_size
    tokenizer = tiny_tokenizer(config.text_config.vocab_size, {"<image>": IMAGE_TOKEN_ID})
    images = DeepseekOcr2ImageProcessorPil(size={"height": size, "width": size}, tile_size=48)
    return DeepseekOcr2Processor(
        image_processor=images, tokenizer=tokenizer, patch_size=1, downsample_ratio=4
    )


CASES = {
    "deepseek_ocr2-tiles": (
        "deepseek_ocr2",
        deepseek_ocr2_config,
        deepseek_ocr2_processor,
        dict(image_sizes=((40, 40), (50, 100))),
    ),
}
