"""LightOnOCR over Qwen3: Pixtral's whole tower, Mistral 3's merger with LightOnOCR's fixed
projector (GELU, no bias), a tied head, and two image sizes in one padded batch.

The real ``LightOnOcrProcessor`` over ``PixtralImageProcessorPil``: unlike Pixtral's
processor it does not hand the image processor the merged patch, so each image is resized
up to multiples of the image processor's own ``patch_size`` (here the tower's 4 pixels),
and its placeholder becomes one ``<|image_pad|>`` per whole merged patch (8 pixels), with
no row breaks. 37x45 gives 40x48 (a 10x12 patch grid: 5x6 tokens); 25x21 gives 28x24, a
7x6 grid whose odd last row the merger drops, as transformers' ``unfold`` does (3x3 tokens).
"""

from transformers import LightOnOcrProcessor
from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil

from mobius.testing import tiny_tokenizer

from ._tiny import TEXT, vl_config

IMAGE_TOKEN_ID = 3
SPECIAL_TOKENS = {"<|image_pad|>": IMAGE_TOKEN_ID, "<|vision_pad|>": 4, "<|vision_end|>": 5}
#: The tokenizer attributes LightOnOcrProcessor reads its tokens from.
NAMED_TOKENS = {
    "image_token": "<|image_pad|>",
    "image_break_token": "<|vision_pad|>",
    "image_end_token": "<|vision_end|>",
}
PROMPTS = ("USER: <|image_pad|>\nw6 w7 w9 ASSISTANT:", "USER: w8 <|image_pad|>\nw2 ASSISTANT: w10")
PIXTRAL = dict(
    model_type="pixtral",
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    image_size=64,
    patch_size=4,
)
QWEN3 = dict(TEXT, model_type="qwen3", head_dim=8)
MERGE = 2


def lighton_ocr_processor(config):
    """The real processor; its image processor rounds sizes to whole tower patches."""
    patch = config.vision_config.patch_size
    return LightOnOcrProcessor(
        image_processor=PixtralImageProcessorPil(
            size={"longest_edge": 64}, patch_size={"height": patch, "width": patch}
        ),
        tokenizer=tiny_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS, NAMED_TOKENS),
        patch_size=config.vision_config.patch_size,
        spatial_merge_size=config.spatial_merge_size,
    )


CASES = {
    "lighton_ocr-qwen3-two-sizes": (
        "lighton_ocr",
        vl_config(
            "lighton_ocr",
            PIXTRAL,
            QWEN3,
            image_token_id=IMAGE_TOKEN_ID,
            spatial_merge_size=MERGE,
            tie_word_embeddings=True,
        ),
        lighton_ocr_processor,
        dict(prompts=PROMPTS, image_sizes=((37, 45), (25, 21))),
    ),
}
