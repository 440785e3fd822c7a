"""Qwen2.5-VL: window attention (partial windows at the grid's edges) with one full-attention
block, two image sizes in one batch, and M-RoPE positions from the model's ``get_rope_index``.

With 4-pixel patches, merge 2 and ``window_size`` 16 a window is 2x2 merge blocks (8x8
patches): the 37x45 image's 5x6-block grid (40x48 pixels) has 3x3 windows, the last row
and column cut short; the 29x21 one (32x24) has 2x2.
"""

from transformers.models.qwen2_5_vl.processing_qwen2_5_vl import Qwen2_5_VLProcessor

from vl_parity_cases._tiny import VideoProcessorOptional
from vl_parity_cases.qwen2_vl import OPTIONS, TEXT, out_hidden_config, qwen2_vl_processor

VISION = dict(
    depth=3,
    hidden_size=32,
    intermediate_size=48,
    num_heads=2,
    patch_size=4,
    spatial_merge_size=2,
    temporal_patch_size=2,
    window_size=16,
    fullatt_block_indexes=[1],
)


class ImageQwen2_5_VLProcessor(VideoProcessorOptional, Qwen2_5_VLProcessor):
    """Qwen2_5_VLProcessor over images only."""


def qwen2_5_vl_config(vision=VISION, text=TEXT, **overrides):
    return out_hidden_config("qwen2_5_vl", vision, text, **overrides)


def qwen2_5_vl_processor(config):
    return qwen2_vl_processor(config, ImageQwen2_5_VLProcessor)


CASES = {
    "qwen2_5_vl-windows-two-sizes": (
        "qwen2_5_vl",
        qwen2_5_vl_config(),
        qwen2_5_vl_processor,
        OPTIONS,
    ),
    # 3x3-block windows, none of full attention, gelu, a tied head
    "qwen2_5_vl-all-windows-gelu-tied": (
        "qwen2_5_vl",
        qwen2_5_vl_config(
            dict(VISION, window_size=24, fullatt_block_indexes=[], hidden_act="gelu"),
            tie_word_embeddings=True,
        ),
        qwen2_5_vl_processor,
        OPTIONS,
    ),
}
