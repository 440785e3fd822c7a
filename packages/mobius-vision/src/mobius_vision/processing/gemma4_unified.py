"""Gemma 4 unified's inputs: merged image patches and raw waveform frames.

Images are Gemma 4's (:mod:`.gemma4`: the same resize within the same pixel budget)
but cut into merged patches of ``patch_size * pooling_kernel_size`` pixels a side,
each one soft token: what ``Gemma4UnifiedImageProcessor`` makes by merging its
``k x k`` teacher patches, without torch. Each audio clip (float32 mono at the
feature extractor's ``sampling_rate``) is padded with zeros to whole frames of
``audio_samples_per_token`` samples; a prompt's clips are padded with zero frames to
the longest: ``input_features [clips, frames, samples_per_frame]`` and
``input_features_mask [clips, frames]`` (bool, True on real frames). A clip's audio
placeholder becomes ``<boa>`` + one audio token per real frame + ``<eoa>``, as
``Gemma4UnifiedProcessor`` writes it.
"""

from __future__ import annotations

import math

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._image import integer
from mobius_vision.processing.gemma4 import Gemma4Processor


class Gemma4UnifiedProcessor(Gemma4Processor):
    """Gemma4UnifiedProcessor over images and audio clips (module docstring)."""

    def pixels(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        patch, kernel, budget = self.patch_settings()
        return self.cut(image, patch * kernel, 1, budget)  # one soft token per merged patch

    @property
    def feature_settings(self) -> dict:
        """The audio feature extractor's settings, nested in the HF processor's."""
        nested = self.settings.processor.get("feature_extractor")
        return nested if isinstance(nested, dict) else {}

    @property
    def sampling_rate(self) -> int:
        """The rate the clips are read at, in Hz."""
        return integer(self.feature_settings, "sampling_rate", 16000, 1000, 192000)

    @property
    def samples_per_frame(self) -> int:
        return integer(self.feature_settings, "audio_samples_per_token", 640, 1, 1 << 16)

    @property
    def audio_token(self) -> str:
        return self.token_text("audio_token", "<|audio|>")

    def with_audio_placeholders(self, prompt: str, count: int) -> str:
        """``prompt`` after one audio placeholder per clip, when it holds none."""
        if count == 0 or self.audio_token in prompt:
            return prompt
        return self.audio_token * count + prompt

    def audio_features(self, clips: list) -> dict[str, np.ndarray]:
        """``input_features`` and ``input_features_mask`` of float32 mono ``clips``."""
        size = self.samples_per_frame
        frames = []
        for clip in clips:
            clip = np.asarray(clip, np.float32).reshape(-1)
            if clip.size == 0:
                raise MobiusError("an audio clip holds no samples")
            whole = math.ceil(clip.size / size) * size
            frames.append(np.pad(clip, (0, whole - clip.size)).reshape(-1, size))
        longest = max(len(f) for f in frames)
        features = np.zeros((len(frames), longest, size), np.float32)
        mask = np.zeros((len(frames), longest), bool)
        for row, clip_frames in enumerate(frames):
            features[row, : len(clip_frames)] = clip_frames
            mask[row, : len(clip_frames)] = True
        return {"input_features": features, "input_features_mask": mask}

    def __call__(self, text: str, images: list, audios: list = ()) -> dict[str, np.ndarray]:
        """Gemma 4's inputs of ``text`` and ``images``, and the frames of ``audios``, ``text``
        holding :attr:`audio_token` once per clip."""
        count = text.count(self.audio_token)
        if count != len(audios):
            raise MobiusError(
                f"the prompt holds {count} {self.audio_token} placeholder(s) for "
                f"{len(audios)} audio clip(s): put one per clip"
            )
        audio = self.audio_features(audios) if audios else {}
        if audio:
            begin = self.token_text("boa_token", "<|audio>")
            end = self.token_text("eoa_token", "<audio|>")
            real = audio["input_features_mask"].sum(-1).tolist()
            pieces = text.split(self.audio_token)
            text = pieces[0] + "".join(
                f"{begin}{self.audio_token * n}{end}{piece}"
                for n, piece in zip(real, pieces[1:], strict=True)
            )
        return {**super().__call__(text, images), **audio}
