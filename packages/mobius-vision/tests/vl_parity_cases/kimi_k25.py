"""Kimi K2.5 over DeepSeek-V3 (MLA, a dense layer then routed + shared experts): a two-layer
patch tower of 4-pixel patches whose 6x6 position table is resampled (bicubic) to each
image's grid, 2x2 blocks merged into image tokens; two images of different sizes.

``Kimi_K25ImageProcessor`` exists only on the torchvision backend, which is not installed;
:class:`KimiK25ImageProcessorPil` is the same processor on the PIL backend for images
within its patch budget (it never upscales: they are only padded, zeros at the bottom and
right, to whole merge blocks, then patched row-major). Resizing a larger image is
torchvision's bicubic, which it refuses rather than imitates.
"""

import math

import numpy as np
from transformers import Kimi_K25Processor
from transformers.image_processing_backends import PilBackend
from transformers.image_processing_utils import BatchFeature
from transformers.image_utils import IMAGENET_STANDARD_MEAN, IMAGENET_STANDARD_STD, SizeDict
from transformers.processing_utils import ImagesKwargs

from mobius.testing import tiny_tokenizer

from . import _tiny
from ._tiny import VideoProcessorOptional, vl_config

IMAGE_TOKEN_ID = 3
VIDEO = "<|kimi_k25_video_placeholder|>"  # in the vocabulary, or the processor counts unknowns
VISION = dict(
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    patch_size=4,
    pos_emb_height=6,
    pos_emb_width=6,
    merge_kernel_size=[2, 2],
)
DEEPSEEK_V3 = dict(
    _tiny.TEXT,
    model_type="deepseek_v3",
    num_key_value_heads=4,  # MLA expands the latent into per-head keys
    q_lora_rank=24,
    kv_lora_rank=16,
    qk_nope_head_dim=12,
    qk_rope_head_dim=8,
    v_head_dim=10,
    n_routed_experts=8,
    n_shared_experts=1,
    num_experts_per_tok=2,
    moe_intermediate_size=24,
    first_k_dense_replace=1,
    n_group=4,
    topk_group=2,
)
PROMPTS = ("USER: <|media_pad|>\nw5 w7 w9 ASSISTANT:", "USER: w3 <|media_pad|>\nw2 ASSISTANT: w4")


def navit_size(height: int, width: int, patch: int, merge: int, max_patches: int, side: int):
    """transformers' ``navit_resize`` (its module imports torchvision): ``((height, width),
    (padded height, padded width))``."""
    scale = min(
        1.0,
        math.sqrt(max_patches / (max(1.0, height // patch) * max(1.0, width // patch))),
        side * patch / height,
        side * patch / width,
    )
    new_height = min(max(1, int(height * scale)), side * patch)
    new_width = min(max(1, int(width * scale)), side * patch)
    factor = merge * patch
    return (new_height, new_width), (
        new_height + (factor - new_height % factor) % factor,
        new_width + (factor - new_width % factor) % factor,
    )


class KimiK25ImagesKwargs(ImagesKwargs, total=False):
    max_patches: int
    patch_size: int
    merge_size: int


class KimiK25ImageProcessorPil(PilBackend):
    """``Kimi_K25ImageProcessor`` on the PIL backend (images within its patch budget)."""

    resample = 3  # bicubic
    size = {"max_height": 512, "max_width": 512}
    max_patches = 16384
    image_mean = IMAGENET_STANDARD_MEAN
    image_std = IMAGENET_STANDARD_STD
    do_resize = do_rescale = do_normalize = do_convert_rgb = True
    patch_size = 14
    merge_size = 2
    valid_kwargs = KimiK25ImagesKwargs
    model_input_names = ["pixel_values", "image_grid_thw"]

    def _preprocess(
        self,
        images,
        do_resize,
        size,
        do_rescale,
        rescale_factor,
        do_normalize,
        image_mean,
        image_std,
        patch_size,
        merge_size,
        max_patches,
        return_tensors,
        **kwargs,
    ):
        patches, grids = [], []
        for image in images:
            height, width = image.shape[-2:]
            if do_resize:
                (new_h, new_w), padded = navit_size(
                    height, width, patch_size, merge_size, max_patches, size.max_height
                )
                if (new_h, new_w) != (height, width):
                    raise NotImplementedError("torchvision's bicubic resize")
                image = self.pad([image], pad_size=SizeDict(height=padded[0], width=padded[1]))[0]
            if do_rescale:
                image = self.rescale(image, rescale_factor)
            if do_normalize:
                image = self.normalize(image, image_mean, image_std)
            c, h, w = image.shape
            rows, cols = h // patch_size, w // patch_size
            grid = image.reshape(c, rows, patch_size, cols, patch_size).transpose(1, 3, 0, 2, 4)
            patches.append(grid.reshape(rows * cols, c, patch_size, patch_size))
            grids.append([1, rows, cols])
        data = {"pixel_values": np.concatenate(patches), "image_grid_thw": np.array(grids)}
        return BatchFeature(data=data, tensor_type=return_tensors)


class ImageKimiK25Processor(VideoProcessorOptional, Kimi_K25Processor):
    """Kimi_K25Processor over images only."""


def kimi_k25_config():
    return vl_config(
        "kimi_k25",
        VISION,
        DEEPSEEK_V3,
        projection_hidden_size=VISION["hidden_size"],
        image_token_id=IMAGE_TOKEN_ID,
    )


def kimi_k25_processor(config):
    vision = config.vision_config
    tokens = {"image_token": ("<|media_pad|>", IMAGE_TOKEN_ID), "video_token": (VIDEO, 4)}
    tokenizer = tiny_tokenizer(
        config.text_config.vocab_size,
        dict(tokens.values()),
        {name: text for name, (text, _) in tokens.items()},
    )
    images = KimiK25ImageProcessorPil(
        patch_size=vision.patch_size, merge_size=vision.merge_kernel_size[0]
    )
    return ImageKimiK25Processor(image_processor=images, tokenizer=tokenizer)


CASES = {
    "kimi_k25-deepseek_v3-two-sizes": (
        "kimi_k25",
        kimi_k25_config(),
        kimi_k25_processor,
        dict(prompts=PROMPTS, image_sizes=((37, 45), (21, 30))),
    ),
}
