"""GOT-OCR 2.0 over Qwen2: windows that do not divide the patch grid (zero-padded), one global
layer, SAM's relative positions, and the conv projector.

The real ``GotOcr2Processor`` over ``GotOcr2ImageProcessorPil`` (one 32x32 image each, no
crops): an 8x8 patch grid, windows of 3 (padded to 9), halved twice by the projector to
4 image tokens, which the processor writes for each ``<imgpad>`` (``num_image_tokens``).
"""

from transformers import GotOcr2Processor
from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil

from mobius.testing import tiny_tokenizer

from ._tiny import TEXT, vl_config

IMAGE = 3
SPECIAL_TOKENS = {"<imgpad>": IMAGE, "<img>": 4, "</img>": 5, "<|im_start|>": 6, "<|im_end|>": 7}
IMG = "<img> <imgpad> </img>"
PROMPTS = (f"<|im_start|> {IMG} w11 w13 w14 <|im_end|>", f"w8 {IMG} w2 w9 w10 w12")
VISION = dict(
    hidden_size=16,
    output_channels=8,
    num_hidden_layers=3,
    num_attention_heads=2,
    image_size=32,
    patch_size=4,
    mlp_dim=32,
    window_size=3,
    global_attn_indexes=[1],
)
QWEN2 = dict(TEXT, model_type="qwen2")


def got_ocr2_config(vision=VISION, text=QWEN2, **overrides):
    return vl_config("got_ocr2", vision, text, image_token_index=IMAGE, **overrides)


def got_ocr2_processor(config):
    """The real processor writing ``(grid / 4)^2`` image tokens per ``<imgpad>``."""
    vision = config.vision_config
    size = vision.image_size
    tokens = (size // vision.patch_size // 4) ** 2
    processor = GotOcr2Processor(
        image_processor=GotOcr2ImageProcessorPil(size={"height": size, "width": size}),
        tokenizer=tiny_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS),
    )
    processor.num_image_tokens = tokens
    return processor


OPTIONS = dict(prompts=PROMPTS)

CASES = {
    "got_ocr2-qwen2-padded-windows": ("got_ocr2", got_ocr2_config(), got_ocr2_processor, OPTIONS),
    # windows that divide the grid, all layers windowed, no relative positions, gelu_new, tied
    "got_ocr2-whole-windows-no-rel-pos-tied": (
        "got_ocr2",
        got_ocr2_config(
            dict(
                VISION,
                window_size=4,
                global_attn_indexes=[],
                use_rel_pos=False,
                hidden_act="gelu_new",
            ),
            tie_word_embeddings=True,
        ),
        got_ocr2_processor,
        OPTIONS,
    ),
}
