"""GLM-4.1V: two image sizes in one batch, the learnt position table resampled bicubically,
the downsample conv, and GLM-4's interleaved partial M-RoPE.

The real ``Glm4vProcessor`` over ``Glm4vImageProcessorPil``: with 4-pixel patches and
merge 2, 37x45 becomes 40x48 (a 10x12 patch grid, 30 image tokens) and 29x21 32x24 (8x6,
12 tokens); both sample the 4x4 table (``image_size`` 16) at their own grid. The
decoder's head_dim 16 rotates half its channels (4 pairs: ``mrope_section [1, 1, 2]``).
Positions are the model's own ``get_rope_index`` (the kit's ``rope_positions``).
"""

from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil
from transformers.models.glm4v.processing_glm4v import Glm4vProcessor

from mobius.testing import tiny_tokenizer
from vl_parity_cases._tiny import VideoProcessorOptional, vl_config
from vl_parity_cases.qwen2_vl import rope_positions

IMAGE, START, END, VIDEO, VIDEO_START, VIDEO_END = 3, 4, 5, 6, 7, 8
SPECIAL_TOKENS = {
    "<|image|>": IMAGE,
    "<|begin_of_image|>": START,
    "<|end_of_image|>": END,
    "<|video|>": VIDEO,
    "<|begin_of_video|>": VIDEO_START,
    "<|end_of_video|>": VIDEO_END,
}
IMG = "<|begin_of_image|> <|image|> <|end_of_image|>"
PROMPTS = (f"USER: {IMG} w11 w7 w9 ASSISTANT:", f"USER: w8 {IMG} w2 ASSISTANT: w10")
VISION = dict(
    depth=2,
    hidden_size=32,
    intermediate_size=48,
    num_heads=2,
    image_size=16,
    patch_size=4,
    spatial_merge_size=2,
    temporal_patch_size=2,
)
TEXT = dict(
    model_type="glm4v_text",
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=96,
    max_position_embeddings=256,
    rope_parameters={
        "rope_type": "default",
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.5,
        "mrope_section": [1, 1, 2],
    },
)


def glm4v_config(vision=VISION, text=TEXT, model_type="glm4v", **overrides):
    return vl_config(
        model_type,
        dict(vision, out_hidden_size=text["hidden_size"]),
        text,
        image_token_id=IMAGE,
        video_token_id=VIDEO,
        image_start_token_id=START,
        image_end_token_id=END,
        video_start_token_id=VIDEO_START,
        video_end_token_id=VIDEO_END,
        **overrides,
    )


class ImageGlm4vProcessor(VideoProcessorOptional, Glm4vProcessor):
    """Glm4vProcessor over images only."""


def glm4v_processor(config):
    """The real processor over the PIL image processor and a tiny tokenizer."""
    vision = config.vision_config
    image_processor = Glm4vImageProcessorPil(
        size={"shortest_edge": 2 * 16 * 16, "longest_edge": 2 * 48 * 48},
        patch_size=vision.patch_size,
        temporal_patch_size=vision.temporal_patch_size,
        merge_size=vision.spatial_merge_size,
    )
    tokenizer = tiny_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS)
    return ImageGlm4vProcessor(image_processor=image_processor, tokenizer=tokenizer)


OPTIONS = dict(prompts=PROMPTS, image_sizes=((37, 45), (29, 21)), rope_positions=rope_positions)

CASES = {
    "glm4v-two-sizes": ("glm4v", glm4v_config(), glm4v_processor, OPTIONS),
    # a 3x3 table, attention biases in the tower, gelu, full rotary, a tied head
    "glm4v-bias-gelu-full-rotary-tied": (
        "glm4v",
        glm4v_config(
            dict(VISION, image_size=12, attention_bias=True, hidden_act="gelu"),
            dict(
                TEXT,
                rope_parameters={
                    "rope_type": "default",
                    "rope_theta": 500.0,
                    "mrope_section": [2, 3, 3],
                },
            ),
            tie_word_embeddings=True,
        ),
        glm4v_processor,
        OPTIONS,
    ),
}
