"""Aya Vision over Cohere2: tiles plus thumbnail (5 per image), one tile, an inner feature layer,
downsample factor 3, the ``default`` strategy (over a CLIP tower, which has a class token to drop),
an untied head.

The kit's images are 37x45: GOT-OCR2's tiling picks a 2x2 grid for them with
``max_patches=4`` (ties favour more tiles), and one tile with ``max_patches=2``.
"""

from transformers import AyaVisionProcessor
from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil

from mobius.testing import tiny_tokenizer

from ._tiny import COHERE2, SIGLIP, vl_config

IMAGE_TOKEN_ID = 3  # <|IMG_PATCH|>, each image token
SPECIAL_TOKENS = {
    "<|IMG_PATCH|>": IMAGE_TOKEN_ID,
    "<image>": 4,  # the prompt's placeholder, replaced by the processor
    "<|START_OF_IMG|>": 5,
    "<|END_OF_IMG|>": 6,
    "<|IMG_LINE_BREAK|>": 7,
    "TILE_GLOBAL": 8,
    **{f"TILE_{i}": 8 + i for i in range(1, 5)},  # before each tile but the thumbnail
}


def aya_config(vision=SIGLIP, text=COHERE2, **overrides):
    return vl_config("aya_vision", vision, text, image_token_index=IMAGE_TOKEN_ID, **overrides)


def aya_processor(max_patches: int):
    def make(config):
        vision = config.vision_config
        size = vision.image_size
        return AyaVisionProcessor(
            image_processor=GotOcr2ImageProcessorPil(
                size={"height": size, "width": size},
                crop_to_patches=True,
                min_patches=1,
                max_patches=max_patches,
            ),
            tokenizer=tiny_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS),
            patch_size=vision.patch_size,
            img_size=size,
            downsample_factor=config.downsample_factor,
        )

    return make


CASES = {
    "aya_vision": ("aya_vision", aya_config(), aya_processor(max_patches=4)),
    "aya_vision-one-tile-layer-1-factor-3": (
        "aya_vision",
        aya_config(
            dict(SIGLIP, image_size=24, vision_use_head=False),  # 6x6 patches, 2x2 tokens
            vision_feature_layer=1,
            downsample_factor=3,
            alignment_intermediate_size=24,
            adapter_layer_norm_eps=1e-5,
        ),
        aya_processor(max_patches=2),
    ),
    "aya_vision-clip-default-untied": (
        "aya_vision",
        aya_config(
            dict(SIGLIP, model_type="clip_vision_model"),
            dict(COHERE2, tie_word_embeddings=False),
            vision_feature_layer=-2,
            vision_feature_select_strategy="default",
            tie_word_embeddings=False,
        ),
        aya_processor(max_patches=4),
    ),
}
