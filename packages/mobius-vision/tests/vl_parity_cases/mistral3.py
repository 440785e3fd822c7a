"""Mistral 3 over Mistral and Ministral 3: a tied and an untied head, the last and an inner
feature layer, merge sizes 2, 3 and 1, projector bias and silu, images of different sizes in
one padded batch, and images the processor shrinks.

The real ``PixtralProcessor`` resizes each image to fit ``longest_edge`` (keeping its aspect
ratio) and up to a multiple of ``patch_size * spatial_merge_size``: with 4-pixel patches and
merge 2 the kit's 37x45 images become 40x48, a 29x21 one 32x24 (padded to the batch's
largest), and with ``longest_edge`` 32 a 70x50 one shrinks to 32x24. Each image's rows of
``[IMG]`` end with ``[IMG_BREAK]``, the last with ``[IMG_END]``.
"""

import importlib
import sys
import types

from transformers.models.pixtral import image_processing_pil_pixtral
from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil

from mobius.testing import tiny_tokenizer

from . import _tiny
from ._tiny import vl_config


def _pixtral_processor_class():
    """transformers' real ``PixtralProcessor`` (the top-level name is a stand-in without torchvision).

    Its module imports ``get_resize_output_image_size`` from the torchvision image
    processor (used only to count tokens ahead of time); the PIL module's copy of that
    function stands in for the import, and the stand-in module is removed again.
    """
    name = "transformers.models.pixtral.image_processing_pixtral"
    stand_in = types.ModuleType(name)
    stand_in.get_resize_output_image_size = (
        image_processing_pil_pixtral.get_resize_output_image_size
    )
    saved = sys.modules.get(name)
    sys.modules[name] = stand_in
    try:
        return importlib.import_module(
            "transformers.models.pixtral.processing_pixtral"
        ).PixtralProcessor
    finally:
        if saved is None:
            del sys.modules[name]
        else:
            sys.modules[name] = saved


PixtralProcessor = _pixtral_processor_class()

IMAGE_TOKEN_ID = 3
SPECIAL_TOKENS = {"[IMG]": IMAGE_TOKEN_ID, "[IMG_BREAK]": 4, "[IMG_END]": 5}
PROMPTS = ("USER: [IMG]\nw6 w7 w9 ASSISTANT:", "USER: w8 [IMG]\nw2 ASSISTANT: w10")
PIXTRAL = dict(
    model_type="pixtral",
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=3,
    num_attention_heads=2,
    image_size=64,  # Pixtral's largest image; the graph takes any size
    patch_size=4,
)
TEXT = dict(_tiny.TEXT, head_dim=8)
MISTRAL = dict(TEXT, model_type="mistral", sliding_window=None)
# YaRN, and Llama 4's query scale changing every 8 positions over the prompts
MINISTRAL3 = dict(
    TEXT,
    model_type="ministral3",
    rope_parameters={
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 8,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "llama_4_scaling_beta": 0.5,
    },
)


def mistral3_config(text: dict, vision: dict = PIXTRAL, **overrides):
    return vl_config("mistral3", vision, text, image_token_index=IMAGE_TOKEN_ID, **overrides)


def mistral3_processor(longest_edge: int = 64):
    def make(config):
        return PixtralProcessor(
            image_processor=PixtralImageProcessorPil(size={"longest_edge": longest_edge}),
            tokenizer=tiny_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS),
            patch_size=config.vision_config.patch_size,
            spatial_merge_size=config.spatial_merge_size,
        )

    return make


CASES = {
    "mistral3-mistral": (
        "mistral3",
        mistral3_config(MISTRAL),
        mistral3_processor(),
        dict(prompts=PROMPTS),
    ),
    # two sizes in one batch: the second image padded, its own grid and rotary positions
    "mistral3-ministral3-untied-two-sizes": (
        "mistral3",
        mistral3_config(MINISTRAL3, tie_word_embeddings=False),
        mistral3_processor(),
        dict(prompts=PROMPTS, image_sizes=((37, 45), (29, 21))),
    ),
    # 37x45 to 48x48 (a multiple of 12): a 12x12 grid merged in 3x3 blocks
    "mistral3-inner-layer-merge-3-bias-silu": (
        "mistral3",
        mistral3_config(
            MISTRAL,
            vision_feature_layer=[-2],
            spatial_merge_size=3,
            multimodal_projector_bias=True,
            projector_hidden_act="silu",
        ),
        mistral3_processor(),
        dict(prompts=PROMPTS),
    ),
    # the processor shrinks the first image (70x50 to 32x24); merge 1 keeps every patch
    "mistral3-merge-1-layer-0-shrunk": (
        "mistral3",
        mistral3_config(MISTRAL, vision_feature_layer=1, spatial_merge_size=1),
        mistral3_processor(longest_edge=32),
        dict(prompts=PROMPTS, image_sizes=((70, 50), (21, 29))),
    ),
}
