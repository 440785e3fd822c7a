"""LLaVA-NeXT: a wide and a tall image in one batch (different tile grids, crops and token
counts), an image exactly a pinpoint's shape, CLIP's inner layers (``default``) and SigLIP's
last (``full``, no class token)."""

from transformers import LlavaNextProcessor
from transformers.models.llava_next.image_processing_pil_llava_next import (
    LlavaNextImageProcessorPil,
)

from mobius.testing import tiny_tokenizer

from . import _tiny
from ._tiny import TOWER, vl_config

IMAGE_TOKEN_ID = 3
CLIP = dict(TOWER, model_type="clip_vision_model")
SIGLIP = dict(TOWER, model_type="siglip_vision_model", vision_use_head=False)
TEXT = dict(_tiny.TEXT, max_position_embeddings=512)
# The default pinpoints' shapes (1x2, 2x1, 2x2, 3x1, 1x3 tiles) at the tiny tile size.
PINPOINTS = [[16, 32], [32, 16], [32, 32], [48, 16], [16, 48]]
WIDE_AND_TALL = dict(image_sizes=((20, 45), (45, 20)))


def llava_next_config(vision: dict, text: dict, **overrides):
    return vl_config(
        "llava_next",
        vision,
        text,
        image_token_index=IMAGE_TOKEN_ID,
        image_grid_pinpoints=PINPOINTS,
        **overrides,
    )


def llava_next_processor(config):
    vision = config.vision_config
    size = vision.image_size
    return LlavaNextProcessor(
        image_processor=LlavaNextImageProcessorPil(
            size={"shortest_edge": size},
            crop_size={"height": size, "width": size},
            image_grid_pinpoints=config.image_grid_pinpoints,
        ),
        tokenizer=tiny_tokenizer(config.text_config.vocab_size, {"<image>": IMAGE_TOKEN_ID}),
        patch_size=vision.patch_size,
        vision_feature_select_strategy=config.vision_feature_select_strategy,
        num_additional_image_tokens=1 if vision.model_type == "clip_vision_model" else 0,
    )


CASES = {
    "llava_next-llama-wide-tall": (
        "llava_next",
        llava_next_config(CLIP, dict(TEXT, model_type="llama")),
        llava_next_processor,
        WIDE_AND_TALL,
    ),
    "llava_next-qwen2-siglip-full-pinpoint-shape": (
        "llava_next",
        llava_next_config(
            SIGLIP,
            dict(TEXT, model_type="qwen2"),
            vision_feature_select_strategy="full",
            vision_feature_layer=-1,
        ),
        llava_next_processor,
        dict(image_sizes=((32, 16), (17, 50))),  # one needs no crop, one a 1x3 grid
    ),
    "llava_next-mistral-layers-0-and-last-silu": (
        "llava_next",
        llava_next_config(
            CLIP,
            dict(TEXT, model_type="mistral", sliding_window=None),
            vision_feature_layer=[0, -1],
            projector_hidden_act="silu",
            multimodal_projector_bias=False,
        ),
        llava_next_processor,
        dict(image_sizes=((40, 31), (13, 29))),
    ),
}
