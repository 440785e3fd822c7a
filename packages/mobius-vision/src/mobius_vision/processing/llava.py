"""LLaVA, ViP-LLaVA and Video-LLaVA's images: CLIP's pipeline, one placeholder per tower token.

Each image is resized (shortest edge), centre-cropped, rescaled and normalised; its
``<image>`` placeholder becomes one token per patch of the crop, plus the tower's
extra tokens (CLIP's class token), less one with the ``default`` feature strategy
(which drops the class token).
"""

from __future__ import annotations

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import BICUBIC, integer

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
#: CLIPImageProcessor's defaults.
CLIP_DEFAULTS = dict(
    size={"shortest_edge": 224},
    resample=BICUBIC,
    do_center_crop=True,
    crop_size={"height": 224, "width": 224},
    image_mean=CLIP_MEAN,
    image_std=CLIP_STD,
)


class LlavaProcessor(ImageTextProcessor):
    """LlavaProcessor (llava, vipllava): CLIP-processed images, a token per tower patch."""

    image_defaults = CLIP_DEFAULTS
    #: The name the model gives its image input.
    pixels_name = "pixel_values"

    @property
    def image_token(self) -> str:  # the tokenizer's named image token, as LlavaProcessor reads it
        return self.token_text("image_token", self.processor_setting("image_token", "<image>"))

    @property
    def patch_size(self) -> int:
        default = self.config_value("patch_size", section="vision_config")
        return integer(self.settings.processor, "patch_size", default, 1, 1 << 12)

    @property
    def strategy(self) -> str:
        default = self.config_value("vision_feature_select_strategy", "default")
        value = self.processor_setting("vision_feature_select_strategy", default)
        if value not in ("default", "full"):
            raise MobiusError(f"unknown vision_feature_select_strategy {value!r}")
        return value

    @property
    def additional_tokens(self) -> int:
        """Tokens the tower adds to its patches: its class token (CLIP) where the processor
        settings do not say."""
        tower = self.config_value("model_type", "", section="vision_config")
        default = 1 if tower in ("clip_vision_model", "") else 0
        return integer(self.settings.processor, "num_additional_image_tokens", default, 0, 64)

    def image_tokens(self, pixels: np.ndarray) -> int:
        """How many tokens one processed image ``[3, h, w]`` becomes."""
        patch = self.patch_size
        count = (pixels.shape[-2] // patch) * (pixels.shape[-1] // patch) + self.additional_tokens
        return count - 1 if self.strategy == "default" else count

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        self.count_placeholders(text, images)
        pixels = [self.image.standard(image) for image in self.arrays(images)]
        text = self.expand(text, [self.image_token * self.image_tokens(p) for p in pixels])
        inputs = self.tokenize(text)
        if pixels:
            inputs[self.pixels_name] = np.stack(pixels)
        return inputs


class VideoLlavaProcessor(LlavaProcessor):
    """VideoLlavaProcessor's images, which it names ``pixel_values_images``."""

    pixels_name = "pixel_values_images"
