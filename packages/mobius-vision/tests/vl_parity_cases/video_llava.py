"""Video-LLaVA with images only: the default inner layer over Llama, and the last two layers
with the ``full`` strategy, silu and no projector bias over Qwen2."""

from transformers import VideoLlavaProcessor
from transformers.models.video_llava.image_processing_video_llava import VideoLlavaImageProcessor
from transformers.processing_utils import ProcessorMixin

from mobius.testing import tiny_tokenizer

from ._tiny import CLIP, TEXT, vl_config

IMAGE_TOKEN_ID, VIDEO_TOKEN_ID = 3, 94
VISION = CLIP


class ImageVideoLlavaProcessor(VideoLlavaProcessor):
    """VideoLlavaProcessor without its video processor: transformers' video processors need
    torchvision, which is not installed, and VideoLlavaProcessor.__init__ hands one on
    positionally. The attributes are its __init__'s; images go through its own code."""

    def __init__(self, image_processor, tokenizer, patch_size, vision_feature_select_strategy):
        ProcessorMixin.__init__(self, image_processor, tokenizer)
        self.patch_size = patch_size
        self.num_additional_image_tokens = 1
        self.vision_feature_select_strategy = vision_feature_select_strategy
        self.image_token, self.video_token = "<image>", "<video>"
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)


def video_llava_config(text: dict, **overrides):
    return vl_config(
        "video_llava",
        VISION,
        text,
        image_token_index=IMAGE_TOKEN_ID,
        video_token_index=VIDEO_TOKEN_ID,
        **overrides,
    )


def video_llava_processor(config):
    vision = config.vision_config
    size = vision.image_size
    specials = {"<image>": IMAGE_TOKEN_ID, "<video>": VIDEO_TOKEN_ID}
    return ImageVideoLlavaProcessor(
        image_processor=VideoLlavaImageProcessor(
            size={"shortest_edge": size}, crop_size={"height": size, "width": size}
        ),
        tokenizer=tiny_tokenizer(config.text_config.vocab_size, specials),
        patch_size=vision.patch_size,
        vision_feature_select_strategy=config.vision_feature_select_strategy,
    )


CASES = {
    "video_llava-llama": (
        "video_llava",
        video_llava_config(dict(TEXT, model_type="llama")),
        video_llava_processor,
    ),
    "video_llava-qwen2-last-two-full-silu-no-bias": (
        "video_llava",
        video_llava_config(
            dict(TEXT, model_type="qwen2"),
            vision_feature_layer=[-2, -1],
            vision_feature_select_strategy="full",
            projector_hidden_act="silu",
            multimodal_projector_bias=False,
        ),
        video_llava_processor,
    ),
}
