"""DeepSeek-VL's images: the longer side resized to the tower's size (the shorter rounded, at
least ``min_size``), padded to a square with the mean colour; ``num_image_tokens`` per image."""

from __future__ import annotations

import numpy as np

from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import (
    ImageSettings,
    flag,
    image_size,
    integer,
    pad_to_square,
    resize,
)
from mobius_vision.processing._tiles import GOT_OCR2_DEFAULTS


class DeepseekVLProcessor(ImageTextProcessor):
    """DeepseekVLProcessor: one square image, ``num_image_tokens`` placeholders each."""

    image_defaults = GOT_OCR2_DEFAULTS  # 384 squares, bicubic, CLIP's mean and std

    @property
    def image_token(self) -> str:
        return self.token_text("image_token", "<image_placeholder>")

    def process(self, image: np.ndarray) -> np.ndarray:
        """One image's float32 pixels: :meth:`square`, rescaled and normalised."""
        return self.image.finish(self.square(image, self.image))

    @staticmethod
    def square(image: np.ndarray, settings: ImageSettings) -> np.ndarray:
        """``image`` (uint8) resized as ``settings`` say and padded square with their mean colour."""
        if settings.do_resize:
            height, width = image_size(image)
            side = settings.size["height"]
            low = integer(settings.raw, "min_size", 14, 1, 1 << 16)
            scale = side / max(height, width)
            target = (max(round(height * scale), low), max(round(width * scale), low))
            image = resize(image, target, settings.resample)
        if flag(settings.raw, "do_pad", True):  # the mean colour, as the processor makes it
            image = pad_to_square(image, tuple(int(m * 255) for m in settings.image_mean))
        return image

    def image_block(self) -> str:
        """What one placeholder becomes: ``num_image_tokens`` image tokens."""
        size = self.config_value("image_size", 384, section="vision_config")
        patch = self.config_value("patch_size", 16, section="vision_config")
        count = integer(self.settings.processor, "num_image_tokens", (size // patch) ** 2, 1)
        return self.image_token * count

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        self.count_placeholders(text, images)
        inputs = self.tokenize(self.expand(text, [self.image_block()] * len(images)))
        if images:
            inputs.update(self.pixel_inputs(self.arrays(images)))
        return inputs

    def pixel_inputs(self, images: list[np.ndarray]) -> dict[str, np.ndarray]:
        """The image inputs of ``[3, h, w]`` uint8 ``images``: ``pixel_values``."""
        return {"pixel_values": np.stack([self.process(image) for image in images])}
