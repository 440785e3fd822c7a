"""ViP-LLaVA: several tower layers (the last and the embeddings among them) over Llama, and one
inner layer given as an int over Qwen2 with silu, another eps and a tied head."""

from transformers import AutoConfig, LlavaProcessor
from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

from mobius.testing import tiny_tokenizer

from ._tiny import CLIP, TEXT

IMAGE_TOKEN_ID = 3
VISION = CLIP


def vipllava_config(text: dict, **overrides):
    def make():
        return AutoConfig.for_model(
            "vipllava",
            vision_config=dict(VISION),
            text_config=dict(text),
            image_token_index=IMAGE_TOKEN_ID,
            **overrides,
        )

    return make


def vipllava_processor(config):
    """The processor transformers maps vipllava to: LlavaProcessor, the class token not counted."""
    vision = config.vision_config
    size = vision.image_size
    return LlavaProcessor(
        image_processor=CLIPImageProcessorPil(
            size={"shortest_edge": size}, crop_size={"height": size, "width": size}
        ),
        tokenizer=tiny_tokenizer(config.text_config.vocab_size, {"<image>": IMAGE_TOKEN_ID}),
        patch_size=vision.patch_size,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
    )


CASES = {
    "vipllava-llama-layers-last-0-1": (
        "vipllava",
        vipllava_config(dict(TEXT, model_type="llama"), vision_feature_layer=[-1, 0, 1]),
        vipllava_processor,
    ),
    "vipllava-qwen2-layer-int-silu-eps-tied": (
        "vipllava",
        vipllava_config(
            dict(TEXT, model_type="qwen2"),
            vision_feature_layer=-2,
            projector_hidden_act="silu",
            projector_layernorm_eps=1e-6,
            tie_word_embeddings=True,
        ),
        vipllava_processor,
    ),
}
