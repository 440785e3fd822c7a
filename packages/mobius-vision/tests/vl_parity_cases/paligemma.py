"""PaliGemma over Gemma (the prompt a bidirectional prefix) and PaliGemma 2 over Gemma 2 (sliding
and full layers, soft-capping), through the real PaliGemmaProcessor."""

from transformers import PaliGemmaProcessor
from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

from mobius.testing import tiny_tokenizer

from . import _tiny
from ._tiny import vl_config

IMAGE, BOS = 5, 2
VISION = dict(_tiny.TOWER, num_hidden_layers=2, projection_dim=32)
TEXT = dict(_tiny.TEXT, head_dim=8)
TEXT_CONFIGS = {
    "gemma": dict(TEXT, model_type="gemma"),
    "gemma2": dict(TEXT, model_type="gemma2", sliding_window=8),
}
PROMPTS = ("w5 w7 w9 w11", "w3 w2")
OPTIONS = dict(prompts=PROMPTS, first_position=1)


def paligemma_config(text: dict):
    projection_dim = VISION["projection_dim"]
    return vl_config("paligemma", VISION, text, image_token_id=IMAGE, projection_dim=projection_dim)


def paligemma_processor(config):
    size = config.vision_config.image_size
    image_processor = SiglipImageProcessorPil(size={"height": size, "width": size})
    patches = (size // config.vision_config.patch_size) ** 2
    image_processor.image_seq_length = patches
    tokenizer = tiny_tokenizer(
        config.text_config.vocab_size,
        {"<image>": IMAGE, "<bos>": BOS},
        {"image_token": "<image>", "bos_token": "<bos>"},
    )
    return PaliGemmaProcessor(image_processor=image_processor, tokenizer=tokenizer)


CASES = {
    f"paligemma-{name}": ("paligemma", paligemma_config(text), paligemma_processor, OPTIONS)
    for name, text in TEXT_CONFIGS.items()
}
