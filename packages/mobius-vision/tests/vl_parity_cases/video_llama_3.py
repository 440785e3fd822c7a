"""VideoLLaMA3 over images: its SigLIP-style rotary tower (unmerged patches, attention within
each image), the readout projector and a Qwen2 decoder; two image sizes in one batch through
the real ``VideoLlama3Processor`` over ``VideoLlama3ImageProcessorPil``.

With 4-pixel patches and ``max_pixels`` 32x32, 37x45 becomes 28x32 (a 7x8 grid, 56 image
tokens) and 29x21 becomes 28x20 (35 tokens).
"""

from transformers.models.video_llama_3.image_processing_pil_video_llama_3 import (
    VideoLlama3ImageProcessorPil,
)
from transformers.models.video_llama_3.processing_video_llama_3 import VideoLlama3Processor

from mobius.testing import tiny_tokenizer

from ._tiny import VideoProcessorOptional, vl_config
from .qwen2_vl import IMAGE, PROMPTS, SPECIAL_TOKENS, VIDEO
from .qwen2_vl import TEXT as QWEN2_VL_TEXT

VISION = dict(
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=2,
    patch_size=4,
    rope_parameters={"rope_type": "axial", "rope_theta": 100.0},
)
# Qwen2-VL's tiny decoder as a plain Qwen2 (1-D rotary)
TEXT = {k: v for k, v in QWEN2_VL_TEXT.items() if k != "rope_parameters"}


class ImageVideoLlama3Processor(VideoProcessorOptional, VideoLlama3Processor):
    """VideoLlama3Processor over images only."""


def video_llama_3_processor(config):
    image_processor = VideoLlama3ImageProcessorPil(
        min_pixels=16 * 16, max_pixels=32 * 32, patch_size=config.vision_config.patch_size
    )
    tokenizer = tiny_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS)
    return ImageVideoLlama3Processor(image_processor=image_processor, tokenizer=tokenizer)


CASES = {
    "video_llama_3-qwen2-two-sizes": (
        "video_llama_3",
        vl_config("video_llama_3", VISION, TEXT, image_token_id=IMAGE, video_token_id=VIDEO),
        video_llama_3_processor,
        dict(prompts=PROMPTS, image_sizes=((37, 45), (29, 21))),
    ),
}
