"""Gemma 3n's images: a square resize (SigLIP's image processor), and each
``<image_soft_token>`` placeholder becomes the image block ``\\n\\n<start_of_image>`` +
``image_seq_length`` image tokens + ``<end_of_image>\\n\\n``; ``token_type_ids`` mark the
image tokens 1 and audio tokens 3, as transformers' ``mm_token_type_ids``.
"""

from __future__ import annotations

import numpy as np

from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import BICUBIC, integer

IMAGE_TYPE, AUDIO_TYPE = 1, 3


class Gemma3nProcessor(ImageTextProcessor):
    """Gemma3nProcessor over images: the image block per placeholder, modality types."""

    image_defaults = dict(
        size={"height": 768, "width": 768},
        resample=BICUBIC,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )

    @property
    def image_token(self) -> str:
        return self.token_text("image_token", "<image_soft_token>")

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        self.count_placeholders(text, images)
        begin = self.token_text("boi_token", "<start_of_image>")
        end = self.token_text("eoi_token", "<end_of_image>")
        default = self.config_value("vision_soft_tokens_per_image", 256)
        length = integer(self.settings.processor, "image_seq_length", default, 1, 1 << 16)
        block = f"\n\n{begin}{self.image_token * length}{end}\n\n"
        inputs = self.tokenize(self.expand(text, [block] * len(images)))
        ids = inputs["input_ids"]
        audio = self.token_id(self.token_text("audio_token", "<audio_soft_token>"))
        types = np.where(ids == self.token_id(self.image_token), IMAGE_TYPE, 0)
        inputs["token_type_ids"] = np.where(ids == audio, AUDIO_TYPE, types).astype(np.int64)
        if images:
            inputs["pixel_values"] = np.stack([self.image.standard(i) for i in self.arrays(images)])
        return inputs
