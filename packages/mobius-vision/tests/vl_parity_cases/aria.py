"""Aria over its MoE decoder: two images of different shapes, each resized to the 490-pixel crop
and zero-padded (the padding patches masked in the tower and as the projector's keys), 8 of the
table's 12 learned queries per crop, the tower's last layer before its final norm."""

from transformers import AriaProcessor
from transformers.models.aria.image_processing_pil_aria import AriaImageProcessorPil

from mobius.testing import tiny_tokenizer

from ._tiny import TEXT, vl_config

IMAGE_TOKEN_ID = 3
QUERIES = 8
# Aria crops to 490 or 980 pixels only: the tiny tower takes the smaller real crop size
VISION = dict(
    model_type="idefics3_vision",
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    image_size=490,
    patch_size=14,
)
ARIA_TEXT = dict(TEXT, model_type="aria_text", intermediate_size=24, moe_num_experts=4, moe_topk=2)
PROMPTS = ("<|img|> w7 w9 w11", "w13 <|img|> w8 w10")


class Aria490Processor(AriaProcessor):
    """AriaProcessor cropping to 490 pixels, as ``processor(..., max_image_size=490)`` does (its
    default of 980 overrides the image processor's setting)."""

    images_kwargs = {"max_image_size": 490}


def aria_processor(config, split: bool = False):
    """The real processor; short sides scaled to no less than 16 pixels (so small images pad)."""
    return Aria490Processor(
        image_processor=AriaImageProcessorPil(
            max_image_size=490, min_image_size=16, split_image=split
        ),
        tokenizer=tiny_tokenizer(
            config.text_config.vocab_size,
            {"<|img|>": IMAGE_TOKEN_ID},
            {"image_token": "<|img|>"},
        ),
        size_conversion={490: QUERIES},
    )


CASES = {
    "aria-two-shapes-padded": (
        "aria",
        vl_config(
            "aria",
            VISION,
            ARIA_TEXT,
            image_token_index=IMAGE_TOKEN_ID,
            projector_patch_to_query_dict={1225: QUERIES, 4900: 12},
        ),
        aria_processor,
        dict(prompts=PROMPTS, image_sizes=((37, 45), (8, 40))),
    ),
}
