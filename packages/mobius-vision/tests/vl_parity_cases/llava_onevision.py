"""LLaVA-OneVision: SigLIP (``full``) over Qwen2 with a wide and a tall image; a small
``anyres_max`` that shrinks one image's map bilinearly (to a size where Python's float ``//``
is exact) and not the other's; a prompt with two images (left untiled) beside one with one;
CLIP's inner layer (``default``) over Llama."""

from transformers import LlavaOnevisionProcessor
from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
    LlavaOnevisionImageProcessorPil,
)

from mobius.testing import tiny_tokenizer

from . import _tiny
from ._tiny import TOWER, vl_config

IMAGE_TOKEN_ID, VIDEO_TOKEN_ID = 3, 4
CLIP = dict(TOWER, model_type="clip_vision_model")
SIGLIP = dict(TOWER, model_type="siglip_vision_model", vision_use_head=False)
TEXT = dict(_tiny.TEXT, max_position_embeddings=512)
# Up to 3x3 tiles, as the default list goes up to 6x6.
PINPOINTS = [[16 * h, 16 * w] for h in (1, 2, 3) for w in (1, 2, 3)]


class ImageOnevisionProcessor(LlavaOnevisionProcessor):
    """LlavaOnevisionProcessor without its video processor: transformers' video processors need
    torchvision, which is not installed. Images go through LlavaOnevisionProcessor's own code."""

    def __init__(self, image_processor, tokenizer, **kwargs):
        super().__init__(image_processor, tokenizer, None, **kwargs)


def onevision_config(vision: dict, text: dict, **overrides):
    return vl_config(
        "llava_onevision",
        vision,
        text,
        image_token_index=IMAGE_TOKEN_ID,
        video_token_index=VIDEO_TOKEN_ID,
        image_grid_pinpoints=PINPOINTS,
        **overrides,
    )


def onevision_processor(config):
    vision = config.vision_config
    size = vision.image_size
    has_class_token = vision.model_type == "clip_vision_model"
    special = {"<image>": IMAGE_TOKEN_ID, "<video>": VIDEO_TOKEN_ID}
    return ImageOnevisionProcessor(
        image_processor=LlavaOnevisionImageProcessorPil(
            size={"height": size, "width": size},
            image_grid_pinpoints=config.image_grid_pinpoints,
        ),
        tokenizer=tiny_tokenizer(config.text_config.vocab_size, special),
        num_image_tokens=(size // vision.patch_size) ** 2 + has_class_token,
        vision_feature_select_strategy=config.vision_feature_select_strategy,
        vision_aspect_ratio=config.vision_aspect_ratio,
    )


CASES = {
    "llava_onevision-qwen2-siglip-wide-tall": (
        "llava_onevision",
        onevision_config(SIGLIP, dict(TEXT, model_type="qwen2")),
        onevision_processor,
        dict(image_sizes=((20, 45), (45, 20))),
    ),
    "llava_onevision-qwen2-siglip-shrink-one": (
        "llava_onevision",
        # a 6x12 map shrinks by 1.5 to 4x8; the 4x4 map of a small square stays
        onevision_config(
            SIGLIP, dict(TEXT, model_type="qwen2"), vision_aspect_ratio="anyres_max_2"
        ),
        onevision_processor,
        dict(image_sizes=((20, 45), (16, 16))),
    ),
    "llava_onevision-qwen2-siglip-multi-image-prompt": (
        "llava_onevision",
        onevision_config(SIGLIP, dict(TEXT, model_type="qwen2")),
        onevision_processor,
        # batch_num_images [2, 1]: the first prompt's two images untiled, the other's tiled
        dict(
            prompts=(
                "USER: <image> <image>\nw5 w7 ASSISTANT:",
                "USER: w3 <image>\nw2 ASSISTANT: w4",
            ),
            image_counts=(2, 1),
            image_sizes=((20, 45), (30, 18), (45, 20)),
        ),
    ),
    "llava_onevision-llama-clip-default-shrink": (
        "llava_onevision",
        onevision_config(
            CLIP,
            dict(TEXT, model_type="llama"),
            vision_feature_select_strategy="default",
            vision_feature_layer=-2,
            vision_aspect_ratio="anyres_max_1",
        ),
        onevision_processor,
        dict(image_sizes=((37, 45), (50, 19))),
    ),
}
