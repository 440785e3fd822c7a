"""PP-Chart2Table: GOT-OCR 2.0's model from its own config type (``pp_chart2table``, tower
``pp_chart2table_vision``), over Qwen2 with a tied head, through its own processor.

The real ``PPChart2TableProcessor`` expands nothing (on the hub the chat template writes
the image tokens): a prompt holds its ``(grid / 4)^2`` ``<imgpad>`` per image already,
here 4 for a 32x32 image of 4-pixel patches. ``PPChart2TableImageProcessorPil`` resizes
each image to ``size`` (bicubic, CLIP's mean and std).
"""

from transformers import PPChart2TableProcessor
from transformers.models.pp_chart2table.image_processing_pil_pp_chart2table import (
    PPChart2TableImageProcessorPil,
)

from mobius.testing import tiny_tokenizer

from ._tiny import vl_config
from .got_ocr2 import IMAGE, QWEN2, SPECIAL_TOKENS, VISION

#: Image tokens per image: the 8x8 patch grid halved twice.
IMAGE_TOKENS = 4
IMG = "<img> " + "<imgpad> " * IMAGE_TOKENS + "</img>"
PROMPTS = (f"<|im_start|> {IMG} w11 w13 w14 <|im_end|>", f"w8 {IMG} w2 w9 w10 w12")


def pp_chart2table_processor(config):
    size = config.vision_config.image_size
    return PPChart2TableProcessor(
        image_processor=PPChart2TableImageProcessorPil(size={"height": size, "width": size}),
        tokenizer=tiny_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS),
    )


CASES = {
    "pp_chart2table-qwen2-tied": (
        "pp_chart2table",
        vl_config(
            "pp_chart2table",
            dict(VISION, model_type="pp_chart2table_vision"),
            QWEN2,
            image_token_index=IMAGE,
            tie_word_embeddings=True,
        ),
        pp_chart2table_processor,
        dict(prompts=PROMPTS),
    ),
}
