"""Idefics3 over Llama: images split into tiles of the tower's size plus a global view, two images
of different shapes (5 and 3 tiles: the batch pads with all-zero tiles, which are dropped); one
tile per image with a 3x3 pixel shuffle and a tied head; a tile size the patches do not divide
(and a text config whose own tie flag transformers ignores)."""

from transformers import Idefics3Processor
from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

from mobius.testing import tiny_tokenizer

from . import _tiny
from ._tiny import vl_config

IMAGE_TOKEN_ID = 3
# What the processor writes around the image tokens: <fake_token_around_image>, <global-img>, the
# <row_i_col_j> of each crop; it adds <end_of_utterance> itself when missing.
SPECIAL_TOKENS = {
    "<image>": IMAGE_TOKEN_ID,
    "<fake_token_around_image>": 4,
    "<global-img>": 5,
    "<end_of_utterance>": 6,
    **{f"<row_{i + 1}_col_{j + 1}>": 90 + 6 * i + j for i in range(6) for j in range(6)},
}
VISION = dict(_tiny.TOWER, num_hidden_layers=2)
TEXT = dict(_tiny.LLAMA, vocab_size=128, max_position_embeddings=512)
PROMPTS = ("User: <image>\nw7 w9 w11 Assistant:", "User: w13 <image>\nw8 Assistant: w10")
# 37x45 -> 32x32: 2x2 crops and the global view; 8x40 -> 16x32: 1x2 crops and the global view.
TWO_SHAPES = dict(prompts=PROMPTS, image_sizes=((37, 45), (8, 40)))


def idefics3_config(model_type: str, vision: dict, text: dict = TEXT, **overrides):
    vision = dict(vision, model_type=f"{model_type}_vision")
    return vl_config(model_type, vision, text, image_token_id=IMAGE_TOKEN_ID, **overrides)


def image_processor(config, processor_class, split: bool):
    """Tiles of the tower's image size; images first resized to at most two tiles a side."""
    size = config.vision_config.image_size
    return processor_class(
        size={"longest_edge": 2 * size},
        max_image_size={"longest_edge": size},
        do_image_splitting=split,
    )


def image_seq_len(config) -> int:
    vision = config.vision_config
    return (vision.image_size // vision.patch_size // config.scale_factor) ** 2


def idefics3_processor(split: bool = True):
    def make(config):
        return Idefics3Processor(
            image_processor=image_processor(config, Idefics3ImageProcessorPil, split),
            tokenizer=tiny_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS),
            image_seq_len=image_seq_len(config),
        )

    return make


CASES = {
    "idefics3-split-two-shapes": (
        "idefics3",
        idefics3_config("idefics3", VISION),
        idefics3_processor(),
        TWO_SHAPES,
    ),
    "idefics3-no-split-scale-3-tied-gelu": (
        "idefics3",
        idefics3_config(
            "idefics3",
            dict(VISION, image_size=24, hidden_act="gelu", layer_norm_eps=1e-5),
            scale_factor=3,
            tie_word_embeddings=True,
        ),
        idefics3_processor(split=False),
        dict(prompts=PROMPTS),
    ),
    # 18 // 4: the conv and the patch mask drop the last two pixel rows and columns. The text
    # config's tie flag is not the one transformers reads: the head stays untied.
    "idefics3-odd-tile-size-text-tie-flag": (
        "idefics3",
        idefics3_config(
            "idefics3",
            dict(VISION, image_size=18, num_hidden_layers=3),
            dict(TEXT, tie_word_embeddings=True),
        ),
        idefics3_processor(),
        dict(prompts=PROMPTS),
    ),
}
