"""SmolVLM over Llama: Idefics3's cases through SmolVLMProcessor (its own image processor and
prompt layout), images of two shapes (5 and 3 tiles) and one tile per image."""

from transformers import SmolVLMProcessor
from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil

from mobius.testing import tiny_tokenizer

from .idefics3 import (
    PROMPTS,
    SPECIAL_TOKENS,
    TWO_SHAPES,
    VISION,
    idefics3_config,
    image_processor,
    image_seq_len,
)


class ImageSmolVLMProcessor(SmolVLMProcessor):
    """SmolVLMProcessor without its video processor: transformers' video processors need
    torchvision, which is not installed. Images go through SmolVLMProcessor's own code."""

    def __init__(self, image_processor, tokenizer, image_seq_len=169, chat_template=None):
        super().__init__(image_processor, tokenizer, None, image_seq_len, chat_template)


def smolvlm_processor(split: bool = True):
    def make(config):
        return ImageSmolVLMProcessor(
            image_processor=image_processor(config, SmolVLMImageProcessorPil, split),
            tokenizer=tiny_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS),
            image_seq_len=image_seq_len(config),
        )

    return make


CASES = {
    "smolvlm-split-two-shapes": (
        "smolvlm",
        idefics3_config("smolvlm", VISION),
        smolvlm_processor(),
        dict(TWO_SHAPES, images_per_prompt=True),  # SmolVLMProcessor wants a list per prompt
    ),
    "smolvlm-no-split-scale-4": (
        "smolvlm",
        idefics3_config("smolvlm", dict(VISION, image_size=32), scale_factor=4),
        smolvlm_processor(split=False),
        dict(prompts=PROMPTS, images_per_prompt=True),
    ),
}
