"""LFM3-VL over LFM3: two images of different grids in one batch (the conv layers' neighbours
stop at each frame's edges; attention stays within each frame), conv and attention tower
layers, GQA in the tower, a 2x2 merge projector; the decoder's conv, sliding and full layers.

The real ``Lfm3VlProcessor`` over the Qwen2-VL PIL image processor (what transformers maps
``lfm3_vl`` to) resizes each image to multiples of ``patch_size * merge_size``: 37x45
becomes 40x48 (a 10x12 grid, 30 image tokens), 29x21 becomes 32x24 (8x6, 12 tokens).
"""

from transformers import Lfm3VlProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from mobius.testing import tiny_tokenizer

from ._tiny import TEXT, VideoProcessorOptional, vl_config
from .qwen2_vl import PROMPTS, SPECIAL_TOKENS

IMAGE, START, END, VIDEO = (SPECIAL_TOKENS[t] for t in SPECIAL_TOKENS)
VISION = dict(
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=3,
    layer_types=["conv", "full_attention", "conv"],
    num_attention_heads=4,
    num_key_value_heads=2,
    conv_kernel_size=3,
    patch_size=4,
    temporal_patch_size=2,
    spatial_merge_size=2,
)
LFM3 = dict(
    TEXT,
    model_type="lfm3",
    head_dim=8,
    num_hidden_layers=3,
    layer_types=["conv", "sliding_attention", "full_attention"],
    sliding_window=4,  # shorter than the prompts
    conv_L_cache=3,
    pad_token_id=0,  # the config's defaults are the hub vocabulary's
    bos_token_id=1,
    eos_token_id=2,
)


class ImageLfm3VlProcessor(VideoProcessorOptional, Lfm3VlProcessor):
    """Lfm3VlProcessor over images only."""


def lfm3_vl_processor(config):
    vision = config.vision_config
    image_processor = Qwen2VLImageProcessorPil(
        min_pixels=16 * 16,
        max_pixels=48 * 48,
        patch_size=vision.patch_size,
        temporal_patch_size=vision.temporal_patch_size,
        merge_size=vision.spatial_merge_size,
    )
    tokenizer = tiny_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS)
    return ImageLfm3VlProcessor(image_processor=image_processor, tokenizer=tokenizer)


CASES = {
    "lfm3_vl-two-grids": (
        "lfm3_vl",
        vl_config(
            "lfm3_vl",
            VISION,
            LFM3,
            image_token_id=IMAGE,
            video_token_id=VIDEO,
            vision_start_token_id=START,
            vision_end_token_id=END,
            projector_hidden_size=24,
        ),
        lfm3_vl_processor,
        dict(prompts=PROMPTS, image_sizes=((37, 45), (29, 21))),
    ),
}
