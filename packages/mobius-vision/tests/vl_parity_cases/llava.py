"""LLaVA over each text decoder family it ships with (the composition test), feature layers,
the ``full`` selection strategy."""

from transformers import LlavaProcessor
from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

from mobius.testing import tiny_tokenizer

from ._tiny import CLIP, TEXT, vl_config

IMAGE_TOKEN_ID = 3
VISION = CLIP
TEXT_CONFIGS = {
    "llama": dict(TEXT, model_type="llama"),
    "qwen2": dict(TEXT, model_type="qwen2"),
    "mistral": dict(TEXT, model_type="mistral", sliding_window=None),
    "gemma": dict(TEXT, model_type="gemma", head_dim=8),
    # LLaVA's bare lm_head does not soft-cap, though Gemma 2's own causal LM does.
    "gemma2": dict(TEXT, model_type="gemma2", head_dim=8, final_logit_softcapping=0.5),
}


def llava_config(text: dict, **overrides):
    return vl_config("llava", VISION, text, image_token_id=IMAGE_TOKEN_ID, **overrides)


def llava_processor(config, select_strategy: str | None = None):
    """LlavaProcessor over the tower's image size; ``select_strategy`` (whether the class token
    counts) is the config's unless given."""
    vision = config.vision_config
    size = vision.image_size
    return LlavaProcessor(
        image_processor=CLIPImageProcessorPil(
            size={"shortest_edge": size}, crop_size={"height": size, "width": size}
        ),
        tokenizer=tiny_tokenizer(config.text_config.vocab_size, {"<image>": IMAGE_TOKEN_ID}),
        patch_size=vision.patch_size,
        vision_feature_select_strategy=select_strategy or config.vision_feature_select_strategy,
        num_additional_image_tokens=1,
    )


CASES = {
    **{
        f"llava-{name}": ("llava", llava_config(text), llava_processor)
        for name, text in TEXT_CONFIGS.items()
    },
    "llava-layers-0-and-last-full-silu": (
        "llava",
        llava_config(
            TEXT_CONFIGS["llama"],
            vision_feature_layer=[0, -1],
            vision_feature_select_strategy="full",
            projector_hidden_act="silu",
            multimodal_projector_bias=False,
        ),
        llava_processor,
    ),
}
