"""Gemma 3's images: a square resize, and each ``<start_of_image>`` placeholder becomes the
image block ``\\n\\n<start_of_image>`` + ``image_seq_length`` image tokens +
``<end_of_image>\\n\\n``; ``token_type_ids`` mark the image tokens (they attend both ways).

(Pan and scan is off unless a call asks for it, as Gemma3Processor has it.)
"""

from __future__ import annotations

import numpy as np

from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import BILINEAR, integer


class Gemma3Processor(ImageTextProcessor):
    """Gemma3Processor: the image block per ``<start_of_image>``, image tokens typed 1."""

    image_defaults = dict(size={"height": 224, "width": 224}, resample=BILINEAR)

    @property
    def image_token(self) -> str:  # the prompt's placeholder is the begin-of-image token
        return self.token_text("boi_token", "<start_of_image>")

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        self.count_placeholders(text, images)
        soft = self.token_text("image_token", "<image_soft_token>")
        end = self.token_text("eoi_token", "<end_of_image>")
        default = self.config_value("mm_tokens_per_image", 256)
        length = integer(self.settings.processor, "image_seq_length", default, 1, 1 << 16)
        block = f"\n\n{self.image_token}{soft * length}{end}\n\n"
        inputs = self.tokenize(self.expand(text, [block] * len(images)))
        inputs["token_type_ids"] = (inputs["input_ids"] == self.token_id(soft)).astype(np.int64)
        if images:
            inputs["pixel_values"] = np.stack([self.image.standard(i) for i in self.arrays(images)])
        return inputs
