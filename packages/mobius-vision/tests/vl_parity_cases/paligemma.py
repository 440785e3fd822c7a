"""PaliGemma over Gemma (the prompt a bidirectional prefix) and PaliGemma 2 over Gemma 2 (sliding
and full layers, soft-capping), through the real PaliGemmaProcessor."""

from transformers import AutoConfig, PaliGemmaProcessor
from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

from mobius.testing import tiny_tokenizer

IMAGE, BOS = 5, 2
VISION = dict(
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    image_size=16,
    patch_size=4,
    projection_dim=32,
)
TEXT = dict(
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    vocab_size=96,
    max_position_embeddings=256,
)
TEXT_CONFIGS = {
    "gemma": dict(TEXT, model_type="gemma"),
    "gemma2": dict(TEXT, model_type="gemma2", sliding_window=8),
}
PROMPTS = ("w5 w7 w9 w11", "w3 w2")
OPTIONS = dict(prompts=PROMPTS, first_position=1)


def paligemma_config(text: dict):
    def make():
        return AutoConfig.for_model(
            "paligemma",
            vision_config=dict(VISION),
            text_config=dict(text),
            image_token_id=IMAGE,
            projection_dim=VISION["projection_dim"],
        )

    return make


def paligemma_processor(config):
    size = config.vision_config.image_size
    image_processor = SiglipImageProcessorPil(size={"height": size, "width": size})
    patches = (size // config.vision_config.patch_size) ** 2
    image_processor.image_seq_length = patches
    tokenizer = tiny_tokenizer(
        config.text_config.vocab_size,
        {"<image>": IMAGE, "<bos>": BOS},
        {"image_token": "<image>", "bos_token": "<bos>"},
    )
    return PaliGemmaProcessor(image_processor=image_processor, tokenizer=tokenizer)


CASES = {
    f"paligemma-{name}": ("paligemma", paligemma_config(text), paligemma_processor, OPTIONS)
    for name, text in TEXT_CONFIGS.items()
}
