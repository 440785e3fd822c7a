"""InternVL over Qwen2: images cropped to 2x2 tiles and a thumbnail (5 tower rows per image); an
inner layer with q/k norms, RMS norms and biases in the tower and one tile per image; the last
layer through the final layernorm with downsample_ratio 1/4 over Llama."""

from transformers import InternVLProcessor
from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil

from mobius.testing import tiny_tokenizer

from ._tiny import TEXT, vl_config

IMAGE_TOKEN_ID = 3  # the context token every image token position holds
SPECIAL_TOKENS = {"<image>": IMAGE_TOKEN_ID, "<img>": 92, "</img>": 93, "<video>": 94}
VISION = dict(
    model_type="internvl_vision",
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    image_size=24,
    patch_size=4,
)


class ImageInternVLProcessor(InternVLProcessor):
    """InternVLProcessor without its video processor: transformers' video processors need
    torchvision, which is not installed. Images go through InternVLProcessor's own code."""

    def __init__(self, image_processor, tokenizer, image_seq_length=256, chat_template=None):
        super().__init__(image_processor, tokenizer, None, image_seq_length, chat_template)


def internvl_config(vision: dict, text: dict, **overrides):
    return vl_config("internvl", vision, text, image_token_id=IMAGE_TOKEN_ID, **overrides)


def internvl_processor(max_patches: int):
    """Tiles of the tower's image size; the kit's 37x45 images give 2x2 tiles and a thumbnail
    with ``max_patches=4``, one tile with ``max_patches=1``."""

    def make(config):
        vision = config.vision_config
        size = vision.image_size[0]
        tokenizer = tiny_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS)
        # The named tokens InternVLProcessor reads from the tokenizer (its tokenizer_config's
        # extra special tokens on the hub).
        tokenizer._set_model_specific_special_tokens(
            {
                "context_image_token": "<image>",
                "start_image_token": "<img>",
                "end_image_token": "</img>",
                "video_token": "<video>",
            }
        )
        tokens = (size // vision.patch_size[0] * config.downsample_ratio) ** 2
        return ImageInternVLProcessor(
            image_processor=GotOcr2ImageProcessorPil(
                size={"height": size, "width": size}, max_patches=max_patches
            ),
            tokenizer=tokenizer,
            image_seq_length=int(tokens),
        )

    return make


CASES = {
    "internvl-qwen2-tiles": (
        "internvl",
        internvl_config(VISION, dict(TEXT, model_type="qwen2")),
        internvl_processor(max_patches=4),
    ),
    "internvl-qwen2-inner-layer-qk-norm-rms-bias-untied": (
        "internvl",
        internvl_config(
            dict(
                VISION,
                num_hidden_layers=3,
                use_qk_norm=True,
                norm_type="rms_norm",
                attention_bias=True,
                use_mean_pooling=False,
                use_mask_token=True,
            ),
            dict(TEXT, model_type="qwen2"),
            vision_feature_layer=-2,
            tie_word_embeddings=False,
        ),
        internvl_processor(max_patches=1),
    ),
    "internvl-llama-final-norm-ratio-quarter-silu": (
        "internvl",
        internvl_config(
            dict(VISION, image_size=32, use_mean_pooling=False),
            dict(TEXT, model_type="llama"),
            downsample_ratio=0.25,
            projector_hidden_act="silu",
        ),
        internvl_processor(max_patches=1),
    ),
}
