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
    def samples_per_frame(self) -> int:
        return integer(self.feature_settings, "audio_samples_per_token", 640, 1, 1 << 16)

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

    def audio_tokens(self, mask: np.ndarray) -> int:
        """One audio token per real frame."""
        return int(mask.sum())
