"""Granite-Docling over Granite (µP multipliers away from 1): two pages of different shapes (one
tile; five tiles and the thumbnail: the batch pads with zero tiles, which are dropped), a 4x4
pixel shuffle, DeepStack from two tower layers into the first two decoder layers."""

from transformers import GraniteDoclingProcessor
from transformers.models.granite_docling.image_processing_pil_granite_docling import (
    GraniteDoclingImageProcessorPil,
)

from mobius.testing import tiny_tokenizer

from . import _tiny
from ._tiny import vl_config
from .idefics3 import IMAGE_TOKEN_ID, PROMPTS, SPECIAL_TOKENS

TILE = 32
VISION = dict(
    _tiny.TOWER,
    image_size=TILE,
    num_hidden_layers=3,
    out_hidden_size=32,
    scale_factor=4,
    deepstack_visual_indexes=[0, 2],
)
GRANITE = dict(
    _tiny.TEXT,
    vocab_size=128,
    max_position_embeddings=512,
    embedding_multiplier=3.0,
    residual_multiplier=0.5,
    attention_multiplier=0.3,
    logits_scaling=2.5,
    pad_token_id=0,  # the config's defaults are the hub vocabulary's
    bos_token_id=1,
    eos_token_id=2,
)


def granite_docling_processor(config):
    vision = config.vision_config
    return GraniteDoclingProcessor(
        image_processor=GraniteDoclingImageProcessorPil(
            size={"height": TILE, "width": TILE}, max_patches=6
        ),
        tokenizer=tiny_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS),
        image_seq_len=(vision.image_size // vision.patch_size // vision.scale_factor) ** 2,
    )


CASES = {
    "granite_docling-tiles-deepstack": (
        "granite_docling",
        vl_config(
            "granite_docling", VISION, GRANITE, image_token_id=IMAGE_TOKEN_ID, pad_token_id=0
        ),
        granite_docling_processor,
        dict(prompts=PROMPTS, image_sizes=((37, 45), (8, 40))),
    ),
}
