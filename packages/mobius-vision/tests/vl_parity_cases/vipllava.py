"""ViP-LLaVA: several tower layers (the last and the embeddings among them) over Llama, and one
inner layer given as an int over Qwen2 with silu, another eps and a tied head."""

from ._tiny import TEXT, vl_config
from .llava import IMAGE_TOKEN_ID, VISION, llava_processor


def vipllava_config(text: dict, **overrides):
    return vl_config("vipllava", VISION, text, image_token_index=IMAGE_TOKEN_ID, **overrides)


def vipllava_processor(config):
    """The processor transformers maps vipllava to: LlavaProcessor, the class token not counted."""
    return llava_processor(config, "default")


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
