"""Gemma 3n's images and audio clips.

- Images: a square resize (SigLIP's image processor); each ``<image_soft_token>``
  placeholder becomes the image block ``\\n\\n<start_of_image>`` + ``image_seq_length``
  image tokens + ``<end_of_image>\\n\\n``.
- Audio clips (float32 mono at the feature extractor's ``sampling_rate``) go through
  transformers' numpy ``Gemma3nAudioFeatureExtractor`` made from the package's checked
  settings (:class:`~mobius_vision.processing.gemma4.GemmaAudioClips`): log-mel frames
  ``input_features [clips, frames, mel_bins]`` padded to the longest clip, and
  ``input_features_mask [clips, frames]`` (True on real frames). Each
  ``<audio_soft_token>`` placeholder becomes the audio block ``\\n\\n<start_of_audio>`` +
  ``audio_seq_length`` audio tokens + ``<end_of_audio>\\n\\n``, whatever the clip's length
  (the model pads each clip's tokens to that many).
- ``token_type_ids`` mark image tokens 1 and audio tokens 3, as transformers'
  ``mm_token_type_ids``.
"""

from __future__ import annotations

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import BICUBIC, integer
from mobius_vision.processing.gemma4 import GemmaAudioClips

IMAGE_TYPE, AUDIO_TYPE = 1, 3


class Gemma3nProcessor(GemmaAudioClips, ImageTextProcessor):
    """Gemma3nProcessor over images and audio clips (module docstring)."""

    feature_extractor_class = (
        "transformers.models.gemma3n.feature_extraction_gemma3n.Gemma3nAudioFeatureExtractor"
    )
    image_defaults = dict(
        size={"height": 768, "width": 768},
        resample=BICUBIC,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )

    @property
    def image_token(self) -> str:
        return self.token_text("image_token", "<image_soft_token>")

    @property
    def audio_token(self) -> str:
        return self.token_text("audio_token", "<audio_soft_token>")

    def block(self, kind: str, token: str, begin: str, end: str, default: int) -> str:
        """The block a placeholder becomes: ``begin``, the processor's ``{kind}_seq_length``
        tokens (else config.json's ``{vision|audio}_soft_tokens_per_image``, else
        ``default``), ``end``."""
        config_name = {"image": "vision", "audio": "audio"}[kind] + "_soft_tokens_per_image"
        length = integer(self.settings.config, config_name, default, 1, 1 << 16)
        length = integer(self.settings.processor, f"{kind}_seq_length", length, 1, 1 << 16)
        return f"\n\n{begin}{token * length}{end}\n\n"

    def __call__(self, text: str, images: list, audios: list = ()) -> dict[str, np.ndarray]:
        """The inputs of ``text``, ``images`` and ``audios`` (float32 mono clips), ``text``
        holding :attr:`image_token` once per image and :attr:`audio_token` once per clip."""
        self.count_placeholders(text, images)
        count = text.count(self.audio_token)
        if count != len(audios):
            raise MobiusError(
                f"the prompt holds {count} {self.audio_token} placeholder(s) for "
                f"{len(audios)} audio clip(s): put one per clip"
            )
        begin = self.token_text("boa_token", "<start_of_audio>")
        end = self.token_text("eoa_token", "<end_of_audio>")
        audio_block = self.block("audio", self.audio_token, begin, end, 188)
        text = text.replace(self.audio_token, audio_block) if audios else text
        begin = self.token_text("boi_token", "<start_of_image>")
        end = self.token_text("eoi_token", "<end_of_image>")
        image_block = self.block("image", self.image_token, begin, end, 256)
        inputs = self.tokenize(self.expand(text, [image_block] * len(images)))
        ids = inputs["input_ids"]
        types = np.where(ids == self.token_id(self.image_token), IMAGE_TYPE, 0)
        audio_id = self.token_id(self.audio_token)
        inputs["token_type_ids"] = np.where(ids == audio_id, AUDIO_TYPE, types).astype(np.int64)
        if images:
            inputs["pixel_values"] = np.stack([self.image.standard(i) for i in self.arrays(images)])
        return {**inputs, **(self.audio_features(audios) if audios else {})}
