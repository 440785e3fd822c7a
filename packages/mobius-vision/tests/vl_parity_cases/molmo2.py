"""Molmo2 over its Qwen3-style decoder (and its OLMo-style one, Molmo2-O's): a two-layer patch tower read at both layers, 16-pixel
crops of 4-pixel patches (up to four overlapping crops plus the global view), 2x2 attention
pooling; two images of different sizes.

transformers' ``Molmo2ImageProcessor`` is a torchvision class (not installed here): it runs
with its two torchvision calls replaced by what they compute on float tensors, bilinear
``interpolate`` without antialiasing and ``(x - mean) / std``
(:class:`Molmo2ImageProcessorTorch`), RGB arrays in (no conversion). Transformers' prefill
takes the processor's ``mm_token_type_ids`` (image tokens attend both ways), which the kit
does not pass: :func:`with_image_blocks` adds them as the processor makes them.
"""

import torch
import torch.nn.functional as F
from transformers import AutoConfig, Molmo2Processor
from transformers.models.molmo2.image_processing_molmo2 import Molmo2ImageProcessor

from mobius.testing import tiny_tokenizer

from ._tiny import VideoProcessorOptional

VOCAB = 80  # the head's; the markers sit in the 16 additional rows
IMAGE_TOKENS = {
    "<im_patch>": 80,
    "<im_col>": 81,
    "<im_start>": 82,
    "<low_res_im_start>": 83,
    "<frame_start>": 84,
    "<im_end>": 85,
    "<frame_end>": 86,
    "<im_low>": 87,
}
OTHER_TOKENS = {"<|image|>": 88, "<|video|>": 89, "<|endoftext|>": 90}
PROMPTS = ("USER: <|image|> w5 w7 w9 ASSISTANT:", "USER: w3 <|image|> w2 ASSISTANT: w4")


class Molmo2ImageProcessorTorch(Molmo2ImageProcessor):
    """Molmo2's image processor with torchvision's float resize and normalize in torch."""

    def resize(self, image, size, resample=None, antialias=True, **kwargs):
        shape = (size.height, size.width)
        return F.interpolate(image, size=shape, mode="bilinear", align_corners=False)

    def normalize(self, image, mean, std, inplace=False):
        mean = torch.as_tensor(mean, dtype=image.dtype).view(-1, 1, 1)
        std = torch.as_tensor(std, dtype=image.dtype).view(-1, 1, 1)
        return (image - mean) / std


class ImageMolmo2Processor(VideoProcessorOptional, Molmo2Processor):
    """Molmo2Processor over images only."""


def molmo2_config(**text):
    """The tiny config; ``text`` changes fields of its decoder."""
    return AutoConfig.for_model(
        "molmo2",
        vision_config=dict(
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            head_dim=8,
            image_size=[16, 16],
            patch_size=4,
        ),
        adapter_config=dict(
            vision_feature_layer=[-1, 0],
            hidden_size=16,
            num_attention_heads=4,
            num_key_value_heads=2,  # grouped queries in the pooling attention
            head_dim=4,
            intermediate_size=24,
            text_hidden_size=32,
            mlp_bias=True,
        ),
        text_config=dict(
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
            vocab_size=VOCAB,
            additional_vocab_size=16,
            attention_bias=True,
            max_position_embeddings=256,
            **text,
        ),
        image_patch_id=IMAGE_TOKENS["<im_patch>"],
        image_start_token_id=IMAGE_TOKENS["<im_start>"],
        low_res_image_start_token_id=IMAGE_TOKENS["<low_res_im_start>"],
        image_end_token_id=IMAGE_TOKENS["<im_end>"],
        frame_start_token_id=IMAGE_TOKENS["<frame_start>"],
        frame_end_token_id=IMAGE_TOKENS["<frame_end>"],
    )


def molmo2_processor(config):
    tokenizer = tiny_tokenizer(
        VOCAB + config.text_config.additional_vocab_size,
        {**IMAGE_TOKENS, **OTHER_TOKENS},
        {"image_token": "<|image|>", "video_token": "<|video|>"},
    )
    tokenizer.eos_token = "<|endoftext|>"  # the processor starts each prompt with it
    images = Molmo2ImageProcessorTorch(
        size={"height": 16, "width": 16},
        patch_size=4,
        max_crops=4,
        overlap_margins=[1, 1],
        pooling_size=[2, 2],
        do_convert_rgb=False,
    )
    return ImageMolmo2Processor(image_processor=images, tokenizer=tokenizer)


def with_image_blocks(model):
    """The model's prefill with the ``mm_token_type_ids`` its processor gives (1 on image tokens)."""

    def prefill(**feeds):
        marks = torch.tensor(list(IMAGE_TOKENS.values()))
        types = torch.isin(feeds["input_ids"], marks).long()
        return model(**feeds, mm_token_type_ids=types)

    return prefill


OPTIONS = dict(prompts=PROMPTS, image_sizes=((37, 45), (21, 30)), prefill_model=with_image_blocks)


def molmo2_olmo_config():
    """Molmo2-O's decoder: q/k normalised over all heads, each branch's output normalised."""
    return molmo2_config(qk_norm_type="olmo", norm_after=True)


CASES = {
    "molmo2-qwen3-two-sizes": ("molmo2", molmo2_config, molmo2_processor, OPTIONS),
    "molmo2-olmo-post-norm": ("molmo2", molmo2_olmo_config, molmo2_processor, OPTIONS),
}
