"""InstructBLIP-Video's inputs: one video as four frames, ``4 * num_query_tokens`` video tokens
before the prompt, the prompt again in the Q-Former's vocabulary.

A video is given as its frames (``mobius generate PKG PROMPT --image f1.png ... --image
f4.png``): transformers' processor always puts ``4 * num_query_tokens`` placeholders, so
the model reads exactly four frames. Each frame is resized, rescaled and normalised as
BLIP's image processor does it (the settings of the HF processor's ``video_processor``:
384 x 384, bicubic, CLIP's mean and std), with Pillow; transformers' video processor
resizes with torchvision, which can differ from Pillow's bicubic in the last bits.
``pixel_values`` is ``[1, frames, 3, height, width]``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._image import ImageSettings
from mobius_vision.processing.blip_2 import InstructBlipProcessor

#: The frames transformers' processor makes room for.
FRAMES = 4


class InstructBlipVideoProcessor(InstructBlipProcessor):
    """InstructBlipVideoProcessor, the frames of one video for ``images``."""

    @classmethod
    def from_package(cls, package_dir: str | Path, tokenizer=None):
        processor = super().from_package(package_dir, tokenizer)
        video = processor.settings.processor.get("video_processor")
        if not processor.settings.image and isinstance(video, dict):  # transformers 5 nests it
            processor.image = ImageSettings.from_dict(video, **cls.image_defaults)
        return processor

    @property
    def image_token(self) -> str:
        return self.token_text("video_token", "<video>")

    @property
    def image_token_id(self) -> int:
        """The config's ``video_token_index`` (what the model replaces), else the token's id."""
        value = self.config_value("video_token_index")
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        return self.token_id(self.image_token)

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        """``images``: the video's frames, four of them (or none, for the decoder alone)."""
        if images and len(images) != FRAMES:
            raise MobiusError(
                f"instructblipvideo reads a video as {FRAMES} frames: give --image {FRAMES} "
                f"times (got {len(images)} image(s))"
            )
        if self.image_token in text:
            raise MobiusError(
                f"instructblipvideo puts the video tokens before the prompt itself: "
                f"leave {self.image_token} out of it"
            )
        inputs = self.tokenize(text)
        if not images:  # the decoder alone: the Q-Former reads the prompt only with a video
            return inputs
        tokens = np.full((1, FRAMES * self.num_query_tokens), self.image_token_id, np.int64)
        inputs["input_ids"] = np.concatenate([tokens, inputs["input_ids"]], axis=1)
        inputs["attention_mask"] = np.ones_like(inputs["input_ids"])
        frames = [self.image.standard(frame) for frame in self.arrays(images)]
        inputs["pixel_values"] = np.stack(frames)[None]  # [1, frames, 3, height, width]
        encoded = self.qformer_tokenizer(text, add_special_tokens=self.add_special_tokens)
        ids = np.asarray([encoded["input_ids"]], dtype=np.int64)
        inputs["qformer_input_ids"] = ids
        inputs["qformer_attention_mask"] = np.ones_like(ids)
        return inputs
