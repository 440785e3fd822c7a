"""Ovis2 over Qwen2: the AIMv2-style tower (RMS norms, SwiGLU) with a 2x2 hidden stride, its
visual vocabulary (a softmax over the head, matmul with the table), the indicator tokens
around each image's atoms; the kit's 37x45 images cut into 2x1 tiles and a thumbnail."""

from transformers import Ovis2Processor
from transformers.models.ovis2.image_processing_pil_ovis2 import Ovis2ImageProcessorPil

from mobius.testing import tiny_tokenizer

from ._tiny import TEXT, vl_config

IMAGE = 3  # <IMG_ATOM>, every image token position
INDICATORS = {"<IMG_START>": 4, "<IMG_GRID>": 5, "<IMG_COL>": 6, "<IMG_ROW>": 7, "<IMG_END>": 8}
SPECIAL_TOKENS = {"<IMG_ATOM>": IMAGE, **INDICATORS, "<image>": 9}
VISION = dict(
    model_type="ovis2_vision",
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    image_size=16,
    patch_size=4,
    hidden_stride=2,
    vocab_size=24,
    qkv_bias=True,
    mlp_bias=True,
)
QWEN2 = dict(TEXT, model_type="qwen2")
PROMPTS = ("<|im_start|> <image> w11 w13 w14", "w8 <image> w2 w9 w10 w12")


def ovis2_config(vision=VISION, text=QWEN2, **overrides):
    return vl_config(
        "ovis2",
        vision,
        text,
        image_token_id=IMAGE,
        visual_indicator_token_ids=list(INDICATORS.values()),
        vocab_size=text["vocab_size"],
        hidden_size=text["hidden_size"],
        **overrides,
    )


def ovis2_processor(crop: bool):
    """The real Ovis2Processor over its PIL image processor at the tower's size."""

    def make(config):
        vision = config.vision_config
        side = vision.image_size // vision.patch_size // vision.hidden_stride
        return Ovis2Processor(
            image_processor=Ovis2ImageProcessorPil(
                size={"height": vision.image_size, "width": vision.image_size},
                crop_to_patches=crop,
                max_patches=4,
            ),
            tokenizer=tiny_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS),
            image_seq_length=side * side,
        )

    return make


CASES = {
    "ovis2-qwen2-tiles-stride-2": (
        "ovis2",
        ovis2_config(),
        ovis2_processor(crop=True),
        dict(prompts=PROMPTS),
    ),
}
