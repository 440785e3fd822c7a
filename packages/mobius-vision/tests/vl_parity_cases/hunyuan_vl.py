"""HunYuan-VL: two image sizes in one batch, the 8x8 position grid resampled up and down, the
convolution merger's newline/begin/end tokens, and 4-axis rotary positions with NTK alpha
(HunyuanOCR's); then 3 axes over a plain rope with biases and an untied head.

The real ``HunYuanVLProcessor`` over ``HunYuanVLImageProcessorPil``: with 4-pixel patches
and merge 2, 37x45 becomes 40x48 (a 10x12 patch grid: 5 rows of 6 blocks plus a newline,
and begin/end: 37 tokens) and 29x21 becomes 32x24 (8x6: 4 * 4 + 2 = 18 tokens). Positions
are the model's own ``get_rope_index`` (position, width, height, image index); decode
steps add its ``rope_deltas`` on all four axes.
"""

from transformers.models.hunyuan_vl.image_processing_pil_hunyuan_vl import (
    HunYuanVLImageProcessorPil,
)
from transformers.models.hunyuan_vl.processing_hunyuan_vl import HunYuanVLProcessor

from mobius.testing import tiny_tokenizer

from ._tiny import vl_config
from .qwen2_vl import rope_positions

IMAGE, START, END, NEWLINE, EOS = 3, 4, 5, 6, 7
SPECIAL_TOKENS = {"<image>": IMAGE, "<image_start>": START, "<image_end>": END, "<eos>": EOS}
NAMED_TOKENS = {
    "image_token": "<image>",
    "image_start_token": "<image_start>",
    "image_end_token": "<image_end>",
}
IMG = "<image_start><image><image_end>"
PROMPTS = (f"USER: {IMG} w11 w7 w9 ASSISTANT:", f"USER: w8 {IMG} w2 ASSISTANT: w10")
VISION = dict(
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=2,
    patch_size=4,
    spatial_merge_size=2,
    max_image_size=32,  # an 8x8 position grid: 10x12 resamples up, 8x6 partly down
)
TEXT = dict(
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=96,
    max_position_embeddings=256,
    eos_token_id=EOS,  # a special token (the default 2 is a word of the tiny tokenizer)
    rope_parameters={
        "rope_type": "xdrope",
        "rope_theta": 10000.0,
        "alpha": 50.0,
        "factor": 1.0,
        "xdrope_section": [2, 2, 2, 2],
    },
)


def hunyuan_vl_processor(config):
    image_processor = HunYuanVLImageProcessorPil(
        min_pixels=16 * 16, max_pixels=48 * 48, patch_size=4, merge_size=2
    )
    tokenizer = tiny_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS, NAMED_TOKENS)
    return HunYuanVLProcessor(image_processor=image_processor, tokenizer=tokenizer)


CASES = {
    "hunyuan_vl-two-sizes-4-axes": (
        "hunyuan_vl",
        vl_config(
            "hunyuan_vl",
            VISION,
            TEXT,
            image_token_id=IMAGE,
            im_start_id=START,
            im_end_id=END,
            im_newline_id=NEWLINE,
        ),
        hunyuan_vl_processor,
        dict(prompts=PROMPTS, image_sizes=((37, 45), (29, 21)), rope_positions=rope_positions),
    ),
    # 3 axes (width, height, image index: no sequence axis), a plain rope, biases, an
    # untied head: the decoder's position input and head change
    "hunyuan_vl-3-axes-untied-bias": (
        "hunyuan_vl",
        vl_config(
            "hunyuan_vl",
            dict(VISION, num_hidden_layers=1, max_image_size=16),
            dict(
                TEXT,
                attention_bias=True,
                rope_parameters={
                    "rope_type": "default",
                    "rope_theta": 500.0,
                    "mrope_section": [2, 3, 3],
                },
            ),
            image_token_id=IMAGE,
            im_start_id=START,
            im_end_id=END,
            im_newline_id=NEWLINE,
            tie_word_embeddings=False,
        ),
        hunyuan_vl_processor,
        dict(prompts=PROMPTS, image_sizes=((29, 21), (37, 45)), rope_positions=rope_positions),
    ),
}
