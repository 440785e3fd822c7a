"""DeepSeek-VL over Llama: a SigLIP tower with its (unread) pooling head; a 20x20 image of
25 patches, no head, three layers, an untied output head."""

from transformers import DeepseekVLProcessor
from transformers.models.deepseek_vl.image_processing_pil_deepseek_vl import (
    DeepseekVLImageProcessorPil,
)

from mobius.testing import tiny_tokenizer

from . import _tiny
from ._tiny import LLAMA, vl_config

IMAGE_TOKEN_ID = 3
SIGLIP = dict(_tiny.SIGLIP, num_hidden_layers=2)


def deepseek_vl_config(vision=SIGLIP, text=LLAMA, **overrides):
    return vl_config("deepseek_vl", vision, text, image_token_id=IMAGE_TOKEN_ID, **overrides)


def deepseek_vl_processor(config):
    vision = config.vision_config
    size = vision.image_size
    tokenizer = tiny_tokenizer(
        config.text_config.vocab_size, {"<image>": IMAGE_TOKEN_ID}, {"image_token": "<image>"}
    )
    return DeepseekVLProcessor(
        image_processor=DeepseekVLImageProcessorPil(size={"height": size, "width": size}),
        tokenizer=tokenizer,
        num_image_tokens=(size // vision.patch_size) ** 2,
    )


CASES = {
    "deepseek_vl-llama": ("deepseek_vl", deepseek_vl_config(), deepseek_vl_processor),
    "deepseek_vl-llama-20px-no-head-untied": (
        "deepseek_vl",
        deepseek_vl_config(
            dict(SIGLIP, image_size=20, num_hidden_layers=3, vision_use_head=False),
            tie_word_embeddings=False,
        ),
        deepseek_vl_processor,
    ),
}
