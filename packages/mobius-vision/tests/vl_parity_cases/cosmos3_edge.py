"""Cosmos3 Edge: a packed SigLIP 2 tower with its position table resized per image, a
patch-merging projector, and a ReLU² Llama with interleaved M-RoPE.

The real ``Cosmos3EdgeProcessor`` (Qwen-VL's placeholders) over
``Cosmos3EdgeImageProcessorPil`` (GLM-4V's resizing, patches with the channels last, one
frame), asked for the token types its model's ``generate`` needs. With 4-pixel patches
and merge 2, 37x45 becomes a 10x12 patch grid and 29x21 an 8x6 one: the 10x10 position
table is kept along one axis, upsampled along another and downsampled (antialiased) for
the second image. Positions are the model's own ``get_rope_index``. The config asks for
tied embeddings, which transformers' class ignores (its head stays its own).
"""

from transformers.models.cosmos3_edge.image_processing_pil_cosmos3_edge import (
    Cosmos3EdgeImageProcessorPil,
)
from transformers.models.cosmos3_edge.processing_cosmos3_edge import Cosmos3EdgeProcessor

from mobius.testing import tiny_tokenizer
from vl_parity_cases._tiny import VideoProcessorOptional, vl_config
from vl_parity_cases.qwen2_vl import END, IMAGE, OPTIONS, SPECIAL_TOKENS, START, TEXT, VIDEO

VISION = dict(
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=2,
    patch_size=4,
    num_patches=100,
    spatial_merge_size=2,
)
# head_dim 16: 8 rotary channel pairs, the interleaved section [2, 3, 3]
EDGE_TEXT = dict(TEXT, head_dim=16, hidden_act="relu2")


class ImageCosmos3EdgeProcessor(VideoProcessorOptional, Cosmos3EdgeProcessor):
    """Cosmos3EdgeProcessor over images only, returning ``mm_token_type_ids``."""

    return_mm_token_type_ids = True


def cosmos3_edge_config(**overrides):
    return vl_config(
        "cosmos3_edge",
        VISION,
        EDGE_TEXT,
        image_token_id=IMAGE,
        video_token_id=VIDEO,
        vision_start_token_id=START,
        vision_end_token_id=END,
        projector_hidden_size=40,
        **overrides,
    )


def cosmos3_edge_processor(config):
    vision = config.vision_config
    image_processor = Cosmos3EdgeImageProcessorPil(
        size={"shortest_edge": 16 * 16, "longest_edge": 48 * 48},
        patch_size=vision.patch_size,
        temporal_patch_size=1,
        merge_size=vision.spatial_merge_size,
    )
    tokenizer = tiny_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS)
    return ImageCosmos3EdgeProcessor(image_processor=image_processor, tokenizer=tokenizer)


CASES = {
    "cosmos3_edge-two-sizes-antialiased": (
        "cosmos3_edge",
        cosmos3_edge_config(tie_word_embeddings=True),
        cosmos3_edge_processor,
        OPTIONS,
    ),
}
