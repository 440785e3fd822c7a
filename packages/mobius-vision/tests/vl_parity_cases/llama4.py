"""Llama 4 over its MoE decoder: a dense and an MoE layer, a chunked RoPE layer and a NoPE layer
with temperature tuning (chunks and the query scale change within the prompts), tiled images.

The prompt layout is transformers' own ``Llama4Processor``. Its image processor exists only
as a torchvision class (not installed), so the tiles come from mobius' torch-free one
(:mod:`mobius_vision.processing.llama4`, byte-equal to it: test_llama4_processing.py)
behind transformers' image-processor interface. With 16-pixel tiles (at most 4) the kit's
37x45 image goes on a 2x2 canvas plus a global tile (5 tiles, 20 ``<|patch|>``), a 12x10
one on a single tile (no global tile).
"""

import numpy as np
from transformers import BatchFeature
from transformers.image_processing_utils import BaseImageProcessor
from transformers.modeling_outputs import MoeCausalLMOutputWithPast
from transformers.models.llama4.processing_llama4 import Llama4Processor

from mobius.testing import tiny_tokenizer
from mobius_vision.processing._image import ImageSettings, to_chw
from mobius_vision.processing._settings import PackageSettings
from mobius_vision.processing.llama4 import LLAMA4_DEFAULTS
from mobius_vision.processing.llama4 import Llama4Processor as MobiusLlama4Processor

from ._tiny import vl_config

# transformers 5.24's Llama4ForConditionalGeneration.forward reads ``image_outputs`` off its
# language model's output, a MoeCausalLMOutputWithPast that has no such field, and so fails on
# every call; the field, absent, reads as None.
if not hasattr(MoeCausalLMOutputWithPast, "image_outputs"):
    MoeCausalLMOutputWithPast.image_outputs = None

PATCH_TOKEN_ID = 3
SPECIAL_TOKENS = {
    "<|patch|>": PATCH_TOKEN_ID,
    "<|image|>": 4,
    "<|image_start|>": 5,
    "<|image_end|>": 6,
    "<|tile_x_separator|>": 7,
    "<|tile_y_separator|>": 8,
}
PROMPTS = ("USER: <|image|>\nw15 w17 w19 ASSISTANT:", "USER: w13 <|image|>\nw12 ASSISTANT: w14")
TILE = 16
VISION = dict(
    model_type="llama4_vision_model",
    hidden_size=16,
    intermediate_size=64,  # the pixel shuffle's 4 x hidden
    num_hidden_layers=2,
    num_attention_heads=2,
    image_size=TILE,
    patch_size=4,
    vision_output_dim=32,
    projector_input_dim=32,
    projector_output_dim=32,
)
TEXT = dict(
    model_type="llama4_text",
    hidden_size=32,
    intermediate_size=48,
    intermediate_size_mlp=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    vocab_size=96,
    num_local_experts=3,
    num_experts_per_tok=2,
    interleave_moe_layer_step=2,  # layer 0 dense, layer 1 MoE
    no_rope_layer_interval=2,  # layer 0 chunked RoPE, layer 1 NoPE
    attention_chunk_size=8,
    floor_scale=4,
    attn_scale=0.5,
)


class TorchFreeLlama4Images(BaseImageProcessor):
    """transformers' image-processor interface over mobius' torch-free tiling."""

    model_input_names = ["pixel_values"]

    def __init__(self, size: int = TILE, max_patches: int = 4, **kwargs) -> None:
        super().__init__(**kwargs)
        self.size = {"height": size, "width": size}
        self.max_patches = max_patches

    @property
    def tiler(self) -> MobiusLlama4Processor:
        settings = {"size": self.size, "max_patches": self.max_patches}
        image = ImageSettings.from_dict(settings, **LLAMA4_DEFAULTS)
        return MobiusLlama4Processor(None, image, PackageSettings())

    def preprocess(self, images, return_tensors=None, **kwargs) -> BatchFeature:
        tiler = self.tiler
        tiled = [tiler.tiles(to_chw(np.asarray(image))) for image in images]
        return BatchFeature(
            {
                "pixel_values": np.concatenate([tiles for tiles, _ in tiled]),
                "aspect_ratios": np.asarray([grid for _, grid in tiled]),
            },
            tensor_type=return_tensors,
        )


def llama4_processor(config):
    return Llama4Processor(
        image_processor=TorchFreeLlama4Images(),
        tokenizer=tiny_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS),
        patch_size=config.vision_config.patch_size,
        pixel_shuffle_ratio=config.vision_config.pixel_shuffle_ratio,
    )


def llama4_config(**overrides):
    return vl_config(
        "llama4",
        VISION,
        TEXT,
        image_token_index=PATCH_TOKEN_ID,
        boi_token_index=5,
        eoi_token_index=6,
        **overrides,
    )


CASES = {
    # a tiled image (2x2 + global) and a one-tile image in one batch
    "llama4-moe-chunked-nope": (
        "llama4",
        llama4_config(),
        llama4_processor,
        dict(prompts=PROMPTS, image_sizes=((37, 45), (12, 10))),
    ),
}
