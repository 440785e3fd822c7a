"""MiniCPM-V 4.6 over Qwen3.5's hybrid decoder: SigLIP-style layers over NaViT-packed slices
(the kit's 37x45 images become an overview and two slices of different grids), positions
bucketized per slice, the 2x2 window-attention merger after the first layer, and the 2x2
merger MLP into the decoder.

The real ``MiniCPMV4_6Processor`` over its PIL image processor and its own video processor
(unused), with a tiny tokenizer naming the tokens it reads.
"""

import numpy as np
from transformers import MiniCPMV4_6Processor
from transformers.models.minicpmv4_6.image_processing_pil_minicpmv4_6 import (
    MiniCPMV4_6ImageProcessorPil,
)
from transformers.models.minicpmv4_6.video_processing_minicpmv4_6 import MiniCPMV4_6VideoProcessor

from mobius.testing import tiny_tokenizer

from ._tiny import vl_config

IMAGE = 3
NAMED_TOKENS = {  # the processor's attribute -> its token
    "image_token": "<image>",
    "video_token": "<video>",
    "image_start_token": "<im_start>",
    "image_end_token": "<im_end>",
    "slice_start_token": "<slice>",
    "slice_end_token": "</slice>",
    "image_id_start_token": "<image_id>",
    "image_id_end_token": "</image_id>",
}
SPECIAL_TOKENS = {token: IMAGE + i for i, token in enumerate(NAMED_TOKENS.values())}
VISION = dict(
    model_type="minicpmv4_6_vision",
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    image_size=32,  # an 8x8 position table
    patch_size=4,
)
# Qwen3.5's hybrid decoder, text positions (partial rotary, 8 rotated channels)
QWEN3_5_TEXT = dict(
    model_type="qwen3_5_text",
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    layer_types=["linear_attention", "full_attention"],
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=8,
    linear_value_head_dim=16,
    linear_conv_kernel_dim=4,
    vocab_size=96,
    max_position_embeddings=256,
)
PROMPTS = ("<|im_start|> <image> w11 w13 w14", "w8 <image> w2 w9 w10 w12")


def minicpm_config(model_type: str, vision=VISION, text=QWEN3_5_TEXT, **overrides):
    vision = dict(vision, model_type=f"{model_type}_vision")
    return vl_config(model_type, vision, text, image_token_id=IMAGE, insert_layer_id=0, **overrides)


class VideoProcessorUnchecked:
    """Mixed in before a processor class: its video processor's class is not checked
    (transformers' video processor registry needs torchvision, which is not installed; the
    processor only reads the video processor's settings). Images go through its own code."""

    def check_argument_for_proper_class(self, argument_name, argument):
        if argument_name == "video_processor":
            return None
        return super().check_argument_for_proper_class(argument_name, argument)


class Int64TargetSizes:
    """Mixed in before a processor class: ``target_sizes`` as int64, the type the vision graph
    takes (as every grid input of mobius' graphs); transformers gives int32."""

    def __call__(self, *args, **kwargs):
        out = super().__call__(*args, **kwargs)
        sizes = out.get("target_sizes")
        if isinstance(sizes, np.ndarray):
            out["target_sizes"] = sizes.astype(np.int64)
        elif sizes is not None:  # a torch tensor
            out["target_sizes"] = sizes.long()
        return out


class ImageMiniCPMV4_6Processor(Int64TargetSizes, VideoProcessorUnchecked, MiniCPMV4_6Processor):
    pass


class MiniCPMProcessorMaker:
    """The family's real processor over ``image_processor_class`` at a tiny slice resolution
    (32: the kit's 37x45 images take an overview and two slices)."""

    processor_class = ImageMiniCPMV4_6Processor
    image_processor_class = MiniCPMV4_6ImageProcessorPil
    video_processor_class = MiniCPMV4_6VideoProcessor
    special_tokens = SPECIAL_TOKENS

    def __init__(self, **image_settings) -> None:
        self.image_settings = image_settings

    def __call__(self, config):
        settings = dict(
            scale_resolution=32,
            patch_size=config.vision_config.patch_size,
            downsample_mode=config.downsample_mode,
            **self.image_settings,
        )
        vocab = config.text_config.vocab_size
        tokenizer = tiny_tokenizer(vocab, self.special_tokens, NAMED_TOKENS)
        return self.processor_class(
            image_processor=self.image_processor_class(**settings),
            video_processor=self.video_processor_class(**settings),
            tokenizer=tokenizer,
        )


OPTIONS = dict(prompts=PROMPTS)

CASES = {
    "minicpmv4_6-slices-window-merger": (
        "minicpmv4_6",
        minicpm_config("minicpmv4_6"),
        MiniCPMProcessorMaker(),
        OPTIONS,
    ),
}
