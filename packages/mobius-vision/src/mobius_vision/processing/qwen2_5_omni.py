"""Qwen2.5-Omni's inputs: Qwen-VL's images and Whisper log-mel features of each audio clip.

What ``Qwen2_5OmniProcessor`` does for images and audio, without torch. Images are
Qwen-VL's (:mod:`.qwen_vl`), under the Omni names of the placeholder and its markers
(``<|IMAGE|>`` between ``<|vision_bos|>`` and ``<|vision_eos|>``). Each clip goes through
the package's Whisper feature extractor (transformers' numpy path), padded to the
extractor's window: ``input_features [clips, mel_bins, frames]`` and
``feature_attention_mask [clips, frames]``, 1 for the frames of real samples
(``ceil(samples / hop_length)``). A clip's ``<|AUDIO|>`` becomes
``((frames - 1) // 2 + 1) // 2`` tokens, what the encoder makes of its frames. Audio
tokens take text positions in the M-RoPE indices.

Qwen3-Omni's processor (:class:`Qwen3OmniMoeProcessor`) differs in its token names, pads
a batch to its longest clip, and counts its encoder's tokens otherwise.
"""

from __future__ import annotations

import math

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._image import integer, number
from mobius_vision.processing.qwen_vl import QwenVLProcessor

#: The Whisper feature extractor's settings the processor passes on, checked: (default, low, high).
FEATURE_INTS = {
    "feature_size": (128, 1, 1024),
    "sampling_rate": (16000, 1000, 192000),
    "hop_length": (160, 1, 1 << 16),
    "chunk_length": (30, 1, 3600),
    "n_fft": (400, 2, 1 << 16),
}


class Qwen2_5OmniProcessor(QwenVLProcessor):
    """Qwen2_5OmniProcessor over images and audio clips (module docstring)."""

    default_image_token = "<|IMAGE|>"
    default_vision_start, default_vision_end = "<|vision_bos|>", "<|vision_eos|>"
    default_audio_token = "<|AUDIO|>"
    default_audio_start, default_audio_end = "<|audio_bos|>", "<|audio_eos|>"
    #: How the feature extractor pads a batch: to its window ("max_length"), as this
    #: family's processor asks; a clip longer than the window is refused.
    padding = "max_length"
    _feature_extractor = None

    def audio_tokens(self, frames: int) -> int:
        """The tokens the encoder makes of a clip of ``frames`` real frames."""
        return ((frames - 1) // 2 + 1 - 2) // 2 + 1

    @property
    def audio_token(self) -> str:
        return self.token_text("audio_token", self.default_audio_token)

    @property
    def feature_settings(self) -> dict:
        """The feature extractor's settings: nested in the HF processor's (transformers 5), or
        beside the image processor's in ``preprocessor_config.json`` (the hub's files)."""
        nested = self.settings.processor.get("feature_extractor")
        return nested if isinstance(nested, dict) else self.settings.image

    @property
    def feature_extractor(self):
        """transformers' ``WhisperFeatureExtractor`` with the package's checked settings."""
        if self._feature_extractor is None:
            from transformers import WhisperFeatureExtractor

            settings = self.feature_settings
            kwargs = {
                name: integer(settings, name, default, low, high)
                for name, (default, low, high) in FEATURE_INTS.items()
            }
            kwargs["padding_value"] = number(settings, "padding_value", 0.0)
            kwargs["dither"] = number(settings, "dither", 0.0)
            self._feature_extractor = WhisperFeatureExtractor(**kwargs)
        return self._feature_extractor

    @property
    def sampling_rate(self) -> int:
        """The rate the clips are read at, in Hz."""
        return int(self.feature_extractor.sampling_rate)

    def with_audio_placeholders(self, prompt: str, count: int) -> str:
        """``prompt`` after one ``<|audio_bos|><|AUDIO|><|audio_eos|>`` per clip, when it holds none."""
        if count == 0 or self.audio_token in prompt:
            return prompt
        start = self.token_text("audio_bos_token", self.default_audio_start)
        end = self.token_text("audio_eos_token", self.default_audio_end)
        return f"{start}{self.audio_token}{end}" * count + prompt

    def audio_features(self, clips: list) -> dict[str, np.ndarray]:
        """``input_features`` and ``feature_attention_mask`` of float32 mono ``clips`` (at
        :attr:`sampling_rate`), each padded to the extractor's window."""
        from mobius_audio.generate import extract_inputs

        extractor = self.feature_extractor
        clips = [np.asarray(clip, np.float32).reshape(-1) for clip in clips]
        for clip in clips:
            if clip.size == 0:
                raise MobiusError("an audio clip holds no samples")
            if self.padding == "max_length" and clip.size > extractor.n_samples:
                raise MobiusError(
                    f"an audio clip lasts {clip.size / extractor.sampling_rate:.1f} s; the "
                    f"model's window is {extractor.n_samples / extractor.sampling_rate:.0f} s"
                )
        rate = extractor.sampling_rate
        options = dict(padding=self.padding, truncation=False)
        features = extract_inputs(extractor, clips, rate, **options)["input_features"]
        frames = features.shape[-1]
        mask = np.zeros((len(clips), frames), np.int64)
        for row, clip in enumerate(clips):
            mask[row, : min(math.ceil(clip.size / extractor.hop_length), frames)] = 1
        return {"input_features": features, "feature_attention_mask": mask}

    def __call__(self, text: str, images: list, audios: list = ()) -> dict[str, np.ndarray]:
        """Qwen-VL's inputs of ``text`` and ``images``, and the features of ``audios``
        (float32 mono clips), ``text`` holding :attr:`audio_token` once per clip."""
        count = text.count(self.audio_token)
        if count != len(audios):
            raise MobiusError(
                f"the prompt holds {count} {self.audio_token} placeholder(s) for "
                f"{len(audios)} audio clip(s): put one per clip"
            )
        audio = self.audio_features(audios) if audios else {}
        if audio:
            real = audio["feature_attention_mask"].sum(-1).tolist()
            pieces = text.split(self.audio_token)
            text = pieces[0] + "".join(
                self.audio_token * self.audio_tokens(n) + piece
                for n, piece in zip(real, pieces[1:], strict=True)
            )
        inputs = super().__call__(text, images)
        del inputs["mm_token_type_ids"]  # Qwen2.5-Omni's processor makes none
        return {**inputs, **audio}


class Qwen3OmniMoeProcessor(Qwen2_5OmniProcessor):
    """Qwen3OmniMoeProcessor over images and audio clips (module docstring)."""

    default_image_token = "<|image_pad|>"
    default_vision_start, default_vision_end = "<|vision_start|>", "<|vision_end|>"
    default_audio_token = "<|audio_pad|>"
    default_audio_start, default_audio_end = "<|audio_start|>", "<|audio_end|>"
    padding = "longest"

    def audio_tokens(self, frames: int) -> int:
        """Three halvings of each ``2 * n_window``-frame chunk's frames, summed (transformers
        counts 13 per whole chunk, the halvings of its default 100 frames)."""
        chunk = 2 * integer(self.settings.processor, "n_window", 50, 1, 1 << 16)
        rest = (frames % chunk - 1) // 2 + 1
        return ((rest - 1) // 2 + 1 - 1) // 2 + 1 + (frames // chunk) * 13
