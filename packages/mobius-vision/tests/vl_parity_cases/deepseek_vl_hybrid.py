"""DeepSeek-VL hybrid over Llama: SigLIP at 16 pixels (16 patches) beside a three-layer SAM
tower at 24 pixels (a 6x6 grid: 4-patch windows padded to 8, the middle layer global, read
by the second neck), its 6x6 maps resized up to 16x16 and halved twice to the 4x4 grid."""

from transformers import DeepseekVLHybridProcessor
from transformers.models.deepseek_vl_hybrid.image_processing_pil_deepseek_vl_hybrid import (
    DeepseekVLHybridImageProcessorPil,
)

from mobius.testing import tiny_tokenizer

from . import _tiny
from ._tiny import LLAMA, vl_config

IMAGE_TOKEN_ID = 3
SIGLIP = dict(_tiny.SIGLIP, num_hidden_layers=2)
SAM = dict(
    hidden_size=16,
    output_channels=8,
    num_hidden_layers=3,
    num_attention_heads=2,
    image_size=24,
    patch_size=4,
    window_size=4,
    global_attn_indexes=[1],
    mlp_dim=24,
)


def deepseek_vl_hybrid_config():
    return vl_config(
        "deepseek_vl_hybrid",
        SIGLIP,
        LLAMA,
        high_res_vision_config=dict(SAM),
        image_token_id=IMAGE_TOKEN_ID,
    )


def deepseek_vl_hybrid_processor(config):
    vision, sam = config.vision_config, config.high_res_vision_config
    tokenizer = tiny_tokenizer(
        config.text_config.vocab_size, {"<image>": IMAGE_TOKEN_ID}, {"image_token": "<image>"}
    )
    images = DeepseekVLHybridImageProcessorPil(
        size={"height": vision.image_size, "width": vision.image_size},
        high_res_size={"height": sam.image_size, "width": sam.image_size},
    )
    return DeepseekVLHybridProcessor(
        image_processor=images,
        tokenizer=tokenizer,
        num_image_tokens=(vision.image_size // vision.patch_size) ** 2,
    )


CASES = {
    "deepseek_vl_hybrid-llama": (
        "deepseek_vl_hybrid",
        deepseek_vl_hybrid_config(),
        deepseek_vl_hybrid_processor,
    ),
}
