"""Cohere2 Vision over Cohere2: a 2x2 grid plus thumbnail (5 tiles per image), a 2x1 grid plus
thumbnail (3) with downsample factor 4 and no pooling head, an untied head.

``Cohere2VisionImageProcessor`` exists only on the torchvision backend, which is not
installed; :class:`Cohere2VisionImageProcessorPil` is the same processor on the PIL
backend (GOT-OCR2's, which it derives from, with Cohere2's choice of grid). The
kit's images are 37x45: Cohere2's tiling picks a 2x2 grid for them with
``max_patches=4`` and 2x1 with ``max_patches=2``.
"""

import numpy as np
from transformers import Cohere2VisionProcessor
from transformers.image_transforms import to_channel_dimension_format
from transformers.image_utils import ChannelDimension, SizeDict, get_image_size
from transformers.image_utils import infer_channel_dimension_format as channel_format
from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil

from mobius.testing import tiny_tokenizer

from . import _tiny
from ._tiny import COHERE2, vl_config

IMAGE_TOKEN_ID = 3
# The processor writes the tokenizer's image_token once per image token; Command A Vision's
# is "<|IMG_PATCH|>", here "<image>" so that the kit's prompts hold the placeholder.
TOKENS = {
    "image_token": ("<image>", IMAGE_TOKEN_ID),
    "boi_token": ("<|START_OF_IMG|>", 4),
    "eoi_token": ("<|END_OF_IMG|>", 5),
    "img_line_break_token": ("<|IMG_LINE_BREAK|>", 6),
}
SIGLIP = dict(_tiny.SIGLIP, num_hidden_layers=2)


def cohere2_tiled_canvas(size, tile: int, max_tiles: int) -> tuple[int, int]:
    """Cohere2's ``get_optimal_tiled_canvas`` (its module imports torchvision): (columns, rows).

    The grid that needs the least upscaling to cover the image, or, when every grid
    downscales it, the least downscaling.
    """
    grids = [(w, h) for w in range(1, max_tiles + 1) for h in range(1, max_tiles + 1)]
    grids = sorted((g for g in grids if g[0] * g[1] <= max_tiles), key=lambda g: g[0] * g[1])
    height, width = size
    scale = (np.array(grids) * tile / np.array([width, height])).min(axis=-1)
    if np.all(scale < 1):
        return grids[int(np.argmax(scale))]
    return grids[int(np.argmin(np.where(scale < 1, 10e9, scale)))]


class Cohere2VisionImageProcessorPil(GotOcr2ImageProcessorPil):
    """``Cohere2VisionImageProcessor`` on the PIL backend: the grid's tiles, then the thumbnail."""

    size = {"height": 512, "width": 512}
    crop_to_patches = True
    patch_size = 16  # image tokens per tile side, read by the processor

    def crop_image_to_patches(
        self, image, min_patches, max_patches, use_thumbnail=True, patch_size=None, resample=None
    ):
        fmt = channel_format(image)
        image = to_channel_dimension_format(image, ChannelDimension.FIRST, fmt)
        height, width = get_image_size(image, channel_dim=ChannelDimension.FIRST)
        tile_h, tile_w = patch_size.height, patch_size.width
        columns, rows = cohere2_tiled_canvas((height, width), tile_h, max_patches)
        canvas = SizeDict(height=tile_h * rows, width=tile_w * columns)
        resized = self.resize(image, canvas, resample=resample)
        tiles = [  # row-major, as transformers crops them
            resized[..., r * tile_h : (r + 1) * tile_h, c * tile_w : (c + 1) * tile_w]
            for r in range(rows)
            for c in range(columns)
        ]
        if use_thumbnail and len(tiles) != 1:
            tiles.append(self.resize(image, patch_size, resample=resample))
        return [to_channel_dimension_format(t, fmt, ChannelDimension.FIRST) for t in tiles]

    def get_number_of_image_patches(self, height, width, images_kwargs=None) -> int:
        kwargs = images_kwargs or {}
        max_patches = kwargs.get("max_patches", self.max_patches)
        if not kwargs.get("crop_to_patches", self.crop_to_patches) or max_patches <= 1:
            return 1
        tile = kwargs.get("patch_size", self.size)  # the tile's pixels here
        tile = tile["height"] if isinstance(tile, dict) else tile.height
        columns, rows = cohere2_tiled_canvas((height, width), tile, max_patches)
        return 1 if columns * rows == 1 else 1 + columns * rows


def cohere2_config(vision=SIGLIP, text=COHERE2, **overrides):
    return vl_config("cohere2_vision", vision, text, image_token_id=IMAGE_TOKEN_ID, **overrides)


def cohere2_processor(max_patches: int):
    def make(config):
        vision = config.vision_config
        size = vision.image_size
        image_processor = Cohere2VisionImageProcessorPil(
            size={"height": size, "width": size}, max_patches=max_patches
        )
        image_processor.patch_size = size // (vision.patch_size * config.downsample_factor)
        tokenizer = tiny_tokenizer(config.text_config.vocab_size, dict(TOKENS.values()))
        # As a tokenizer config's extra_special_tokens dict does: named attributes.
        tokenizer._set_model_specific_special_tokens({k: t for k, (t, _) in TOKENS.items()})
        return Cohere2VisionProcessor(image_processor=image_processor, tokenizer=tokenizer)

    return make


CASES = {
    "cohere2_vision": (
        "cohere2_vision",
        cohere2_config(alignment_intermediate_size=40),
        cohere2_processor(max_patches=4),
    ),
    "cohere2_vision-3-tiles-factor-4-no-head-untied": (
        "cohere2_vision",
        cohere2_config(
            dict(SIGLIP, patch_size=2, num_hidden_layers=3, vision_use_head=False),  # 8x8 patches
            dict(COHERE2, tie_word_embeddings=False),
            downsample_factor=4,
            alignment_intermediate_size=24,
            tie_word_embeddings=False,
        ),
        cohere2_processor(max_patches=2),
    ),
}
