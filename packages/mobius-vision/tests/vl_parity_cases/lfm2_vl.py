"""LFM2-VL over LFM2 (conv and attention layers): two image grids in one batch (padding patches
masked), the position table resized to each, a 2x2 unshuffle; a 3x3 one with no projector
layer norm and a tied head.

transformers' ``Lfm2VlImageProcessor`` resizes with torchvision, which is not installed, and
has no PIL backend: the real ``Lfm2VlProcessor`` here runs over :class:`PatchListImageProcessor`,
a stand-in that cuts each image (cropped to whole ``patch * factor`` blocks, normalised)
into the patch rows, shapes and masks the real one returns. The processor's own code
writes the image tokens. What is compared is the model, on inputs of the real layout.
"""

import numpy as np
from transformers import BatchFeature, Lfm2VlProcessor

from mobius.testing import tiny_tokenizer

from ._tiny import TEXT, vl_config

IMAGE = 3
SPECIAL_TOKENS = {
    "<image>": IMAGE,
    "<|image_start|>": 4,
    "<|image_end|>": 5,
    "<|img_thumbnail|>": 6,
}
VISION = dict(
    model_type="siglip2_vision_model",
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_patches=16,
    patch_size=4,
    vision_use_head=False,
)
LFM2 = dict(
    TEXT,
    model_type="lfm2",
    num_hidden_layers=3,
    layer_types=["conv", "full_attention", "conv"],
    conv_L_cache=3,
    block_multiple_of=16,
    block_ffn_dim_multiplier=1.0,
    norm_eps=1e-5,
)
PROMPTS = ("<|im_start|> <image> w11 w13 w14", "w8 <image> w2 w9 w10 w12")


class PatchListImageProcessor:
    """A numpy stand-in of ``Lfm2VlImageProcessor`` (module docstring): one tile per image."""

    use_thumbnail = False

    def __init__(self, patch_size: int, downsample_factor: int) -> None:
        self.encoder_patch_size, self.downsample_factor = patch_size, downsample_factor
        self.tile_size = 512

    def fetch_images(self, images):
        return images

    def __call__(self, images, **kwargs):
        flat = [
            np.asarray(i)
            for group in images
            for i in (group if isinstance(group, list) else [group])
        ]
        p, block = self.encoder_patch_size, self.encoder_patch_size * self.downsample_factor
        rows, shapes, sizes = [], [], []
        for image in flat:
            h, w = image.shape[0] // block * block, image.shape[1] // block * block
            pixels = (image[:h, :w].astype(np.float32) / 255 - 0.5) / 0.5  # [h, w, 3]
            patches = pixels.reshape(h // p, p, w // p, p, 3).transpose(0, 2, 1, 3, 4)
            rows.append(patches.reshape((h // p) * (w // p), -1))
            shapes.append([h // p, w // p])
            sizes.append([h, w])
        longest = max(len(r) for r in rows)
        values = np.zeros((len(rows), longest, rows[0].shape[1]), np.float32)
        mask = np.zeros((len(rows), longest), np.int64)
        for i, r in enumerate(rows):
            values[i, : len(r)], mask[i, : len(r)] = r, 1
        return BatchFeature(
            dict(
                pixel_values=values,
                spatial_shapes=np.asarray(shapes, np.int64),
                pixel_attention_mask=mask,
                image_rows=[1] * len(rows),
                image_cols=[1] * len(rows),
                image_sizes=sizes,
            )
        )


class StandInLfm2VlProcessor(Lfm2VlProcessor):
    """Lfm2VlProcessor over :class:`PatchListImageProcessor`."""

    def check_argument_for_proper_class(self, argument_name, argument):
        if isinstance(argument, PatchListImageProcessor):
            return None
        return super().check_argument_for_proper_class(argument_name, argument)


def lfm2_vl_config(vision=VISION, text=LFM2, **overrides):
    return vl_config("lfm2_vl", vision, text, image_token_id=IMAGE, **overrides)


def lfm2_vl_processor(config):
    return StandInLfm2VlProcessor(
        image_processor=PatchListImageProcessor(
            config.vision_config.patch_size, config.downsample_factor
        ),
        tokenizer=tiny_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS),
    )


OPTIONS = dict(prompts=PROMPTS, image_sizes=((37, 45), (29, 21)), images_per_prompt=True)

CASES = {
    "lfm2_vl-two-grids": (
        "lfm2_vl",
        lfm2_vl_config(projector_hidden_size=24),
        lfm2_vl_processor,
        OPTIONS,
    ),
    "lfm2_vl-factor-3-no-norm-tied": (
        "lfm2_vl",
        lfm2_vl_config(
            downsample_factor=3,
            projector_hidden_size=24,
            projector_use_layernorm=False,
            projector_hidden_act="silu",
            tie_word_embeddings=True,
        ),
        lfm2_vl_processor,
        OPTIONS,
    ),
}
