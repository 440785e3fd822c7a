"""PP-Chart2Table's images: GOT-OCR 2.0's, with prompts that hold every image token already.

``PPChart2TableProcessor`` expands no placeholder: on the hub the chat template writes
each image's ``<imgpad>`` tokens (the tower's ``(grid / 4)^2``), and the processor only
tokenizes the prompt and resizes each image to its image processor's ``size`` (1024
square by default, bicubic, CLIP's mean and std). A prompt without image tokens gets
GOT's ``<img>``, the tokens and ``</img>`` per image, then a newline, in front.
"""

from __future__ import annotations

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._tiles import GOT_OCR2_DEFAULTS
from mobius_vision.processing.got_ocr2 import GotOcr2Processor


class PPChart2TableProcessor(GotOcr2Processor):
    """PPChart2TableProcessor: images resized whole, prompts tokenized as written."""

    image_defaults = dict(GOT_OCR2_DEFAULTS, size={"height": 1024, "width": 1024})

    def count_placeholders(self, text: str, images: list) -> int:
        """How many :attr:`image_token` ``text`` holds: :attr:`image_seq_length` per image."""
        count, per_image = text.count(self.image_token), self.image_seq_length
        if count != per_image * len(images):
            raise MobiusError(
                f"the prompt holds {count} {self.image_token} token(s) for {len(images)} "
                f"image(s): PP-Chart2Table's prompt holds {per_image} per image "
                "(or none, and mobius writes them)"
            )
        return count

    def with_placeholders(self, prompt: str, count: int) -> str:
        if count == 0 or self.image_token in prompt:
            return prompt
        return f"<img>{self.expansion(1)}</img>\n" * count + prompt

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        self.count_placeholders(text, images)
        inputs = self.tokenize(text)
        if images:
            tiles = [self.image.finish(self.tiles(image)[0]) for image in self.arrays(images)]
            inputs["pixel_values"] = np.stack(tiles)
        return inputs
