"""EXAONE 4.5 over EXAONE 4: Qwen2.5-VL's window-attention tower with two key/value heads for
four query heads, sliding and full decoder layers, plain 1-D positions, two image sizes.

The real ``Exaone4_5_Processor`` (Qwen2-VL's, over its PIL image processor): with 4-pixel
patches and merge 2, 37x45 becomes 40x48 (30 image tokens) and 29x21 becomes 32x24 (12).
A window is 2x2 merge blocks; block 1 attends over the whole image.
"""

from transformers.models.exaone4_5.processing_exaone4_5 import Exaone4_5_Processor

from ._tiny import TEXT, VideoProcessorOptional
from .qwen2_vl import PROMPTS, out_hidden_config, qwen2_vl_processor

VISION = dict(
    depth=3,
    hidden_size=32,
    intermediate_size=48,
    num_heads=4,
    num_key_value_heads=2,
    patch_size=4,
    spatial_merge_size=2,
    temporal_patch_size=2,
    window_size=16,
    fullatt_block_indexes=[1],
)
# a sliding layer (a window the prompts outgrow), then a full one
EXAONE4 = dict(TEXT, model_type="exaone4", sliding_window=6, sliding_window_pattern=2)


class ImageExaone4_5_Processor(VideoProcessorOptional, Exaone4_5_Processor):
    """Exaone4_5_Processor over images only."""


def exaone4_5_processor(config):
    return qwen2_vl_processor(config, ImageExaone4_5_Processor)


CASES = {
    "exaone4_5-exaone4-gqa-tower-two-sizes": (
        "exaone4_5",
        out_hidden_config("exaone4_5", VISION, EXAONE4),
        exaone4_5_processor,
        dict(prompts=PROMPTS, image_sizes=((37, 45), (29, 21))),
    ),
}
