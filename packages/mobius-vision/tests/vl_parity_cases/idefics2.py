"""Idefics2 over Mistral: images of two sizes zero-padded to one (padding patches masked in the
tower and the perceiver); image splitting with two images in one prompt (the other prompt's
missing images are all-zero and dropped), gelu perceiver, a tied head.

The real ``Idefics2Processor`` over ``Idefics2ImageProcessorPil``: images are resized to a
longest edge of 32 (37x45 -> 26x32, 29x21 stays) and padded to the batch's largest; with
4-pixel patches a tower row is 8 patches at most, bucketed onto the 8x8 position table.
"""

from transformers import Idefics2Processor
from transformers.models.idefics2.image_processing_pil_idefics2 import Idefics2ImageProcessorPil

from mobius.testing import tiny_tokenizer

from . import _tiny
from ._tiny import vl_config

IMAGE_TOKEN_ID = 3
SPECIAL_TOKENS = {
    "<image>": IMAGE_TOKEN_ID,
    "<fake_token_around_image>": 4,
    "<end_of_utterance>": 5,
}
VISION = dict(_tiny.TOWER, num_hidden_layers=2, image_size=32)
TEXT = dict(_tiny.TEXT, model_type="mistral", vocab_size=128, max_position_embeddings=512)
PERCEIVER = dict(
    hidden_size=TEXT["hidden_size"],
    resampler_n_latents=4,
    resampler_depth=2,
    resampler_n_heads=4,
    resampler_head_dim=8,
    num_key_value_heads=2,
)
PROMPTS = ("User: <image>\nw7 w9 w11 Assistant:", "User: w13 <image>\nw8 Assistant: w10")


def idefics2_config(vision=VISION, text=TEXT, perceiver=PERCEIVER, **overrides):
    return vl_config(
        "idefics2",
        vision,
        text,
        image_token_id=IMAGE_TOKEN_ID,
        perceiver_config=dict(perceiver),
        **overrides,
    )


class ArrayIdefics2Processor(Idefics2Processor):
    """Idefics2Processor taking uint8 arrays: its ``load_image`` takes PIL images (or paths)."""

    def __call__(self, images=None, text=None, **kwargs):
        return super().__call__(images=as_pil(images), text=text, **kwargs)


def as_pil(images):
    from PIL import Image

    if isinstance(images, (list, tuple)):
        return [as_pil(image) for image in images]
    return Image.fromarray(images) if hasattr(images, "shape") else images


def idefics2_processor(split: bool = False):
    def make(config):
        size = config.vision_config.image_size
        return ArrayIdefics2Processor(
            image_processor=Idefics2ImageProcessorPil(
                size={"shortest_edge": 12, "longest_edge": size}, do_image_splitting=split
            ),
            tokenizer=tiny_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS),
            image_seq_len=config.perceiver_config.resampler_n_latents,
        )

    return make


TWO_SIZES = dict(prompts=PROMPTS, image_sizes=((37, 45), (29, 21)))
SPLIT_TWO_IN_ONE = dict(
    prompts=("User: <image> w7 <image>\nw9 Assistant:", "User: w13 <image>\nw8 Assistant: w10"),
    image_counts=(2, 1),
    image_sizes=((37, 45), (45, 20), (29, 21)),
)

CASES = {
    "idefics2-mistral-two-sizes": (
        "idefics2",
        idefics2_config(),
        idefics2_processor(),
        TWO_SIZES,
    ),
    "idefics2-split-two-in-one-gelu-tied": (
        "idefics2",
        idefics2_config(
            perceiver=dict(PERCEIVER, hidden_act="gelu", resampler_depth=1),
            tie_word_embeddings=True,
        ),
        idefics2_processor(split=True),
        SPLIT_TWO_IN_ONE,
    ),
}
