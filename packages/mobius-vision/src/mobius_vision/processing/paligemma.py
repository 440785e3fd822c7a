"""PaliGemma's images: SigLIP's square resize, ``image_seq_length`` tokens each, a prefix of
image tokens, then the BOS, the prompt and a newline (the prompt PaliGemma was trained on).

Positions count from 1, as PaliGemma's generate counts them.
"""

from __future__ import annotations

import numpy as np

from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import BICUBIC, integer

#: SiglipImageProcessor's defaults.
SIGLIP_DEFAULTS = dict(size={"height": 224, "width": 224}, resample=BICUBIC)


class PaliGemmaProcessor(ImageTextProcessor):
    """PaliGemmaProcessor: ``<image>`` x n, BOS, prompt, newline; ``token_type_ids`` zeros."""

    image_defaults = SIGLIP_DEFAULTS
    first_position = 1

    @property
    def image_token(self) -> str:
        return self.token_text("image_token", "<image>")

    @property
    def image_seq_length(self) -> int:
        """Tokens per image: the image processor's setting, else the tower's patch count."""
        size = self.config_value("image_size", 224, section="vision_config")
        patch = self.config_value("patch_size", 14, section="vision_config")
        default = self.config_value("num_image_tokens", None, section="text_config")
        default = default or (size // patch) ** 2
        return integer(self.image.raw, "image_seq_length", default, 1, 1 << 16)

    def with_placeholders(self, prompt: str, count: int) -> str:
        return prompt  # the processor puts the image tokens in front itself

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        bos = self.tokenizer.bos_token or ""
        if images and self.image_token not in text:  # one placeholder per image, in front
            text = self.image_token * len(images) + bos + text + "\n"
        elif images:  # the BOS after the last placeholder
            end = text.rfind(self.image_token) + len(self.image_token)
            text = text[:end] + bos + text[end:] + "\n"
        self.count_placeholders(text, images)
        text = text.replace(self.image_token, self.image_token * self.image_seq_length)
        # The processor turns the tokenizer's own BOS and EOS off: it wrote the BOS.
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = np.asarray([ids], dtype=np.int64)
        inputs = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        inputs["token_type_ids"] = np.zeros_like(ids)
        if images:
            inputs["pixel_values"] = np.stack([self.image.standard(i) for i in self.arrays(images)])
        return inputs
