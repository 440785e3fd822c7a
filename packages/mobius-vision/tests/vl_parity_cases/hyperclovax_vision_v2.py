"""HyperCLOVA X SEED Vision V2: Qwen2.5-VL's windowed tower, a Linear projector from the
merger's ``out_hidden_size`` (48, not the decoder's 64), HyperCLOVA X's decoder with every µP
multiplier away from 1 (the image features are scaled by ``embedding_multiplier`` too) and
post-norms; plain 1-D positions. Two image sizes in one batch through the real
``HyperCLOVAXVisionV2Processor`` over ``Qwen2VLImageProcessorPil``."""

from transformers.models.hyperclovax_vision_v2.processing_hyperclovax_vision_v2 import (
    HyperCLOVAXVisionV2Processor,
)

from vl_parity_cases._tiny import VideoProcessorOptional, vl_config
from vl_parity_cases.qwen2_5_vl import VISION as QWEN2_5_VL_VISION
from vl_parity_cases.qwen2_vl import IMAGE, PROMPTS, VIDEO, qwen2_vl_processor
from vl_parity_cases.video_llama_3 import TEXT as VIDEO_LLAMA_3_TEXT

VISION = dict(QWEN2_5_VL_VISION, out_hidden_size=48)
TEXT = dict(
    VIDEO_LLAMA_3_TEXT,
    model_type="hyperclovax",
    embedding_multiplier=3.0,
    residual_multiplier=0.5,
    attention_multiplier=0.3,
    logits_scaling=2.5,
)


class ImageHyperCLOVAXVisionV2Processor(VideoProcessorOptional, HyperCLOVAXVisionV2Processor):
    """HyperCLOVAXVisionV2Processor over images only."""


OPTIONS = dict(prompts=PROMPTS, image_sizes=((37, 45), (29, 21)))


def hyperclovax_vision_v2_processor(config):
    return qwen2_vl_processor(config, ImageHyperCLOVAXVisionV2Processor)


CASES = {
    "hyperclovax_vision_v2-windows-multipliers-tied": (
        "hyperclovax_vision_v2",
        vl_config(
            "hyperclovax_vision_v2", VISION, TEXT, image_token_id=IMAGE, video_token_id=VIDEO
        ),
        hyperclovax_vision_v2_processor,
        OPTIONS,
    ),
    # no post-norms, an untied head
    "hyperclovax_vision_v2-no-post-norm-untied": (
        "hyperclovax_vision_v2",
        vl_config(
            "hyperclovax_vision_v2",
            VISION,
            dict(TEXT, use_post_norm=False),
            image_token_id=IMAGE,
            video_token_id=VIDEO,
            tie_word_embeddings=False,
        ),
        hyperclovax_vision_v2_processor,
        OPTIONS,
    ),
}
