"""Gemma 3: a SigLIP tower pooled to mm_tokens_per_image, image tokens attending both ways in
the Gemma 3 text decoder (sliding and full layers, a window shorter than the image)."""

from transformers import Gemma3Processor
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

from mobius.testing import tiny_tokenizer

from . import _tiny
from ._tiny import vl_config

IMAGE, BOI, EOI = 5, 6, 7
VISION = dict(_tiny.TOWER, num_hidden_layers=2)
TEXT = dict(
    _tiny.TEXT,
    head_dim=8,
    sliding_window=8,
    layer_types=["sliding_attention", "full_attention"],
)
PROMPTS = ("USER: <start_of_image> w5 w7 w9 ASSISTANT:", "USER: w3 w8 <start_of_image> w2")


def gemma3_config(text=TEXT, tokens=4):
    return vl_config(
        "gemma3",
        VISION,
        text,
        mm_tokens_per_image=tokens,
        image_token_id=IMAGE,
        boi_token_id=BOI,
        eoi_token_id=EOI,
    )


def gemma3_processor(config):
    size = config.vision_config.image_size
    specials = {"<image_soft_token>": IMAGE, "<start_of_image>": BOI, "<end_of_image>": EOI}
    names = {
        "image_token": "<image_soft_token>",
        "boi_token": "<start_of_image>",
        "eoi_token": "<end_of_image>",
    }
    return Gemma3Processor(
        image_processor=Gemma3ImageProcessorPil(size={"height": size, "width": size}),
        tokenizer=tiny_tokenizer(config.text_config.vocab_size, specials, names),
        image_seq_length=config.mm_tokens_per_image,
    )


OPTIONS = dict(prompts=PROMPTS, images_per_prompt=True)
CASES = {
    "gemma3": ("gemma3", gemma3_config(), gemma3_processor, OPTIONS),
    # 16 image tokens under a window of 4: the window also bounds the image block.
    "gemma3-window-inside-image": (
        "gemma3",
        gemma3_config(dict(TEXT, sliding_window=4), tokens=16),
        gemma3_processor,
        OPTIONS,
    ),
}
