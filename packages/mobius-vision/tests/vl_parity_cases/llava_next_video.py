"""LLaVA-NeXT-Video's image path: a wide and a tall image over Llama, with the conv video
resampler (weights the image graphs leave unused)."""

from transformers import LlavaNextVideoProcessor
from transformers.models.llava_next.image_processing_pil_llava_next import (
    LlavaNextImageProcessorPil,
)

from mobius.testing import tiny_tokenizer

from ._tiny import CLIP, LLAMA, VideoProcessorOptional, vl_config

IMAGE_TOKEN_ID, VIDEO_TOKEN_ID = 3, 4
VISION = CLIP
TEXT = dict(LLAMA, max_position_embeddings=512)
PINPOINTS = [[16, 32], [32, 16], [32, 32], [48, 16], [16, 48]]


class ImageLlavaNextVideoProcessor(VideoProcessorOptional, LlavaNextVideoProcessor):
    """LlavaNextVideoProcessor over images only."""


llava_next_video_config = vl_config(
    "llava_next_video",
    VISION,
    TEXT,
    image_token_index=IMAGE_TOKEN_ID,
    video_token_index=VIDEO_TOKEN_ID,
    image_grid_pinpoints=PINPOINTS,
    spatial_pool_mode="conv",
)


def llava_next_video_processor(config):
    vision = config.vision_config
    size = vision.image_size
    special = {"<image>": IMAGE_TOKEN_ID, "<video>": VIDEO_TOKEN_ID}
    return ImageLlavaNextVideoProcessor(
        image_processor=LlavaNextImageProcessorPil(
            size={"shortest_edge": size},
            crop_size={"height": size, "width": size},
            image_grid_pinpoints=config.image_grid_pinpoints,
        ),
        tokenizer=tiny_tokenizer(config.text_config.vocab_size, special),
        patch_size=vision.patch_size,
        vision_feature_select_strategy=config.vision_feature_select_strategy,
        num_additional_image_tokens=1,
    )


CASES = {
    "llava_next_video-llama-wide-tall-images": (
        "llava_next_video",
        llava_next_video_config,
        llava_next_video_processor,
        dict(image_sizes=((24, 41), (47, 22))),
    ),
}
