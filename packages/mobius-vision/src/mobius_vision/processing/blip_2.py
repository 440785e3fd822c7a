"""BLIP-2's and InstructBLIP's inputs: one image, ``num_query_tokens`` image tokens before the prompt.

The image is resized to a square (BLIP's image processor: 384 x 384, bicubic, CLIP's
mean and std), rescaled and normalised. The prompt is tokenized as it is (with the
tokenizer's BOS) and the image tokens go in front of it, before the BOS: the
processor places them itself, so a prompt holds no placeholder. InstructBLIP also
tokenizes the prompt with the Q-Former's tokenizer (the package's
``qformer_tokenizer/``) as ``qformer_input_ids``/``qformer_attention_mask``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import BICUBIC, integer
from mobius_vision.processing._settings import load_tokenizer
from mobius_vision.processing.llava import CLIP_MEAN, CLIP_STD

#: BlipImageProcessor's defaults.
BLIP_DEFAULTS = dict(
    size={"height": 384, "width": 384}, resample=BICUBIC, image_mean=CLIP_MEAN, image_std=CLIP_STD
)


class Blip2Processor(ImageTextProcessor):
    """Blip2Processor: ``image_token`` x ``num_query_tokens``, then the tokenized prompt."""

    image_defaults = BLIP_DEFAULTS

    @property
    def image_token(self) -> str:
        return self.token_text("image_token", "<image>")

    @property
    def num_query_tokens(self) -> int:
        default = self.config_value("num_query_tokens", 32)
        return integer(self.settings.processor, "num_query_tokens", default, 1, 1 << 12)

    @property
    def image_token_id(self) -> int:
        """The config's ``image_token_index`` (what the model replaces), else the token's id."""
        value = self.config_value("image_token_index")
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        return self.token_id(self.image_token)

    def with_placeholders(self, prompt: str, count: int) -> str:
        return prompt  # the processor puts the image tokens in front itself

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        if len(images) > 1:
            raise MobiusError(f"{self.settings.model_type} takes one image per prompt")
        if self.image_token in text:
            raise MobiusError(
                f"{self.settings.model_type} puts the image tokens before the prompt itself: "
                f"leave {self.image_token} out of it"
            )
        inputs = self.tokenize(text)
        if images:
            image_ids = np.full((1, self.num_query_tokens), self.image_token_id, np.int64)
            inputs["input_ids"] = np.concatenate([image_ids, inputs["input_ids"]], axis=1)
            inputs["attention_mask"] = np.ones_like(inputs["input_ids"])
            inputs["pixel_values"] = np.stack([self.image.standard(i) for i in self.arrays(images)])
        return inputs


class InstructBlipProcessor(Blip2Processor):
    """InstructBlipProcessor: BLIP-2's inputs, and the prompt in the Q-Former's vocabulary."""

    #: The folder the HF processor saves the Q-Former's tokenizer in.
    qformer_folder = "qformer_tokenizer"

    def __init__(self, tokenizer, image, settings, qformer_tokenizer=None) -> None:
        super().__init__(tokenizer, image, settings)
        self.qformer_tokenizer = qformer_tokenizer

    @classmethod
    def from_package(cls, package_dir: str | Path, tokenizer=None):
        processor = super().from_package(package_dir, tokenizer)
        folder = Path(package_dir) / cls.qformer_folder
        if not folder.is_dir():
            raise MobiusError(
                f"{package_dir} has no {cls.qformer_folder}/: rebuild it from a checkpoint "
                "directory that holds the processor's Q-Former tokenizer"
            )
        processor.qformer_tokenizer = load_tokenizer(folder)
        return processor

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        inputs = super().__call__(text, images)
        if not images:  # the decoder alone: the Q-Former reads the prompt only with an image
            return inputs
        encoded = self.qformer_tokenizer(text, add_special_tokens=self.add_special_tokens)
        ids = np.asarray([encoded["input_ids"]], dtype=np.int64)
        inputs["qformer_input_ids"] = ids
        inputs["qformer_attention_mask"] = np.ones_like(ids)
        return inputs
