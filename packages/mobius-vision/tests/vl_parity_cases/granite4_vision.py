"""Granite 4 Vision over Granite: a wide and a tall image (different AnyRes grids and unpadded
maps), two layerwise and four spatial window Q-Former downsamplers feeding five decoder layers
(one before the first layer; one target taken twice, the later downsampler kept)."""

from transformers import Granite4VisionProcessor
from transformers.models.llava_next.image_processing_pil_llava_next import (
    LlavaNextImageProcessorPil,
)

from mobius.testing import tiny_tokenizer

from ._tiny import TEXT, vl_config
from .granite_docling import GRANITE
from .llava_next import IMAGE_TOKEN_ID, WIDE_AND_TALL

# the Q-Former's heads are the tower's width over 64: one head at 64
CLIP = dict(
    model_type="clip_vision_model",
    hidden_size=64,
    intermediate_size=32,
    num_hidden_layers=3,
    num_attention_heads=2,
    image_size=16,
    patch_size=2,
)
QFORMER = dict(num_hidden_layers=1, intermediate_size=48, cross_attention_frequency=1)
PINPOINTS = [[16, 32], [32, 16], [32, 32]]
TEXT_LAYERS = dict(GRANITE, num_hidden_layers=5, hidden_size=TEXT["hidden_size"])
PROMPTS = ("USER: <image>\nw5 w7 w9 ASSISTANT:", "USER: w3 <image>\nw2 ASSISTANT: w4")


def granite4_vision_processor(config):
    vision = config.vision_config
    size = vision.image_size
    return Granite4VisionProcessor(
        image_processor=LlavaNextImageProcessorPil(
            size={"shortest_edge": size},
            crop_size={"height": size, "width": size},
            image_grid_pinpoints=config.image_grid_pinpoints,
        ),
        tokenizer=tiny_tokenizer(config.text_config.vocab_size, {"<image>": IMAGE_TOKEN_ID}),
        patch_size=vision.patch_size,
        vision_feature_select_strategy=config.vision_feature_select_strategy,
        num_additional_image_tokens=1,  # CLIP's class token
        downsample_rate=config.downsample_rate,
    )


CASES = {
    "granite4_vision-wide-tall-deepstack": (
        "granite4_vision",
        vl_config(
            "granite4_vision",
            CLIP,
            TEXT_LAYERS,
            qformer_config=QFORMER,
            image_token_index=IMAGE_TOKEN_ID,
            image_grid_pinpoints=PINPOINTS,
            downsample_rate="1/2",
            deepstack_layer_map=[[1, 0], [2, 3]],
            spatial_vision_layer=-1,
            spatial_target_layers=[1, 4, 2, 4],
        ),
        granite4_vision_processor,
        dict(WIDE_AND_TALL, prompts=PROMPTS),
    ),
}
