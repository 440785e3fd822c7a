"""Qwen3-VL: learned positions resampled to two image sizes, DeepStack levels, interleaved M-RoPE.

The real ``Qwen3VLProcessor`` over ``Qwen2VLImageProcessorPil`` (the image processor
Qwen3-VL checkpoints name) places ``grid_t * grid_h * grid_w / merge^2`` image pads
between the vision markers. With 4-pixel patches and merge 2, 37x45 becomes a 10x12
patch grid (30 image tokens) and 29x21 an 8x6 one (12): both resample the learned 3x3
(and 4x4) position tables. DeepStack levels come from blocks out of order
(``[2, 0]``: the first decoder layer gets block 0's level through the second merger).
Positions are the model's own ``get_rope_index`` (the kit's ``rope_positions``).
"""

from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor

from vl_parity_cases._tiny import VideoProcessorOptional
from vl_parity_cases.qwen2_vl import IMAGE, OPTIONS, TEXT, out_hidden_config, qwen2_vl_processor

VISION = dict(
    depth=3,
    hidden_size=32,
    intermediate_size=48,
    num_heads=2,
    patch_size=4,
    spatial_merge_size=2,
    temporal_patch_size=2,
    num_position_embeddings=9,
    deepstack_visual_indexes=[2, 0],
)
# Qwen3 attention (per-head q/k norms); head_dim 16 has 8 rotary channels, of which the
# interleaved section [2, 3, 3] gives height 1, 4, 7 and width 2, 5
QWEN3_TEXT = dict(TEXT, num_hidden_layers=3, head_dim=16)


class ImageQwen3VLProcessor(VideoProcessorOptional, Qwen3VLProcessor):
    """Qwen3VLProcessor over images only."""


def qwen3_vl_config(vision=VISION, text=QWEN3_TEXT, **overrides):
    return out_hidden_config("qwen3_vl", vision, text, **overrides)


def qwen3_vl_processor(config):
    processor = qwen2_vl_processor(config, ImageQwen3VLProcessor)
    assert processor.tokenizer.convert_tokens_to_ids("<|image_pad|>") == IMAGE
    return processor


CASES = {
    "qwen3_vl-deepstack-two-sizes": (
        "qwen3_vl",
        qwen3_vl_config(),
        qwen3_vl_processor,
        OPTIONS,
    ),
    # a 4x4 position table, one DeepStack level per decoder layer, gelu, attention biases,
    # a tied head
    "qwen3_vl-every-layer-gelu-bias-tied": (
        "qwen3_vl",
        qwen3_vl_config(
            dict(
                VISION,
                num_position_embeddings=16,
                deepstack_visual_indexes=[0, 1, 2],
                hidden_act="gelu",
            ),
            dict(QWEN3_TEXT, attention_bias=True),
            tie_word_embeddings=True,
        ),
        qwen3_vl_processor,
        OPTIONS,
    ),
}

# Qwen3-VL-MoE: routed experts (top-2 of 4, renormalised) in every layer but the dense
# mlp_only layer 1
MOE_TEXT = dict(
    QWEN3_TEXT,
    moe_intermediate_size=24,
    num_experts=4,
    num_experts_per_tok=2,
    mlp_only_layers=[1],
)
CASES["qwen3_vl_moe-deepstack-dense-layer"] = (
    "qwen3_vl_moe",
    out_hidden_config("qwen3_vl_moe", VISION, MOE_TEXT),
    qwen3_vl_processor,
    OPTIONS,
)
