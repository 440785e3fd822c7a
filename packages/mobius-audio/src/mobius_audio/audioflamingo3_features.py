"""Audio Flamingo 3's and Music Flamingo's processors in numpy (no torch).

:class:`AudioFlamingo3Inputs` is ``AudioFlamingo3Processor``: each clip is cut into
windows of the Whisper extractor's ``chunk_length`` (at least one, at most
``max_audio_len // chunk_length``: 600 s, the rest dropped), and every window goes
through the extractor (the package's checked preprocessor_config.json,
:func:`~mobius_audio.audio_language_processor.whisper_feature_extractor`) padded to the
full window: ``input_features [windows, mel_bins, frames]`` and ``input_features_mask
[windows, frames]``, 1 for the frames of real samples (``ceil(samples / hop_length)``).
A clip of ``F`` real frames over all its windows makes ``((F - 1) // 2 + 1 - 2) // 2 + 1``
audio tokens (conv2's stride 2, then pairs averaged). The prompt goes through the chat
template where the package has one (a user message of the text, then one audio item:
the layout of the processor's ``apply_transcription_request``), else gets the audio
placeholder (the token of ``audio_token_id``, ``<sound>`` on the hub) in front unless it
holds it already; the placeholder then becomes the clip's token count. Like
transformers' processor, it takes one clip a prompt.

:class:`MusicFlamingoInputs` is ``MusicFlamingoProcessor``: the same, but 1200 s at most,
and the expanded placeholders sit between ``<|sound_bos|>`` and ``<|sound_eos|>``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius_audio.audio_prompts import OneClipPrompt, render_user_turn


class AudioFlamingo3Inputs(OneClipPrompt):
    """``AudioFlamingo3Processor`` in numpy (module docstring), over a package's files; the
    processor :data:`mobius_audio.audio_language_processor.PROCESSORS` holds for it."""

    #: transformers' ``max_audio_len``: seconds of a clip the processor keeps.
    max_audio_seconds = 600
    #: The placeholder when config.json names no ``audio_token_id`` the tokenizer knows.
    default_audio_token = "<sound>"
    name = "Audio Flamingo 3"

    def __init__(self, package_dir: Path, tokenizer, chat_template: str | None) -> None:
        from mobius_audio.audio_language_processor import _read_object, whisper_feature_extractor

        self.package_dir = Path(package_dir)
        self.tokenizer = tokenizer
        self.template = chat_template
        self.feature_extractor = whisper_feature_extractor(Path(package_dir))
        token_id = _read_object(Path(package_dir) / "config.json").get("audio_token_id")
        token = None
        if isinstance(token_id, int) and not isinstance(token_id, bool) and token_id >= 0:
            token = tokenizer.convert_ids_to_tokens(token_id)
        self.audio_token = token if isinstance(token, str) and token else self.default_audio_token

    @property
    def sampling_rate(self) -> int:
        return int(self.feature_extractor.sampling_rate)

    @staticmethod
    def audio_tokens(frames: int) -> int:
        """The tokens the model makes of a clip of ``frames`` real feature frames."""
        return ((frames - 1) // 2 + 1 - 2) // 2 + 1

    def replacement(self, count: int) -> str:
        """What a placeholder becomes for a clip of ``count`` audio tokens."""
        return self.audio_token * count

    @staticmethod
    def user_content(prompt: str, audio: list[dict]) -> list[dict]:
        """The user message's items: the text, then the clip (the transcription request's order)."""
        return [{"type": "text", "text": prompt}, *audio]

    def prompt_text(self, prompt: str, clips: int, *, chat_template: bool, system: str | None):
        """The text the processor tokenizes, before the placeholders are expanded."""
        if chat_template and self.template:
            audio = [{"type": "audio", "path": f"clip{i}.wav"} for i in range(clips)]
            return render_user_turn(self, self.user_content(prompt, audio), system)
        if system is not None:
            raise MobiusError("a system message needs a chat template")
        if clips and self.audio_token not in prompt:
            return self.audio_token * clips + prompt
        return prompt

    def windows(self, clip: np.ndarray) -> list[np.ndarray]:
        """The clip cut into the extractor's windows, as the processor cuts it."""
        if clip.size == 0:
            raise MobiusError("an audio clip holds no samples")
        size = int(self.feature_extractor.n_samples)
        most = int(self.max_audio_seconds // int(self.feature_extractor.chunk_length))
        count = min(max(1, most), math.ceil(clip.size / size))
        return [clip[i * size : (i + 1) * size] for i in range(count)]

    def audio_features(self, clip: np.ndarray) -> tuple[dict[str, np.ndarray], int]:
        """``input_features`` and ``input_features_mask`` of the clip's windows, and its
        audio token count."""
        from mobius_audio.generate import extract_inputs

        extractor = self.feature_extractor
        windows = self.windows(clip)
        options = dict(padding="max_length", truncation=False)
        features = extract_inputs(extractor, windows, self.sampling_rate, **options)
        mask = np.zeros((len(windows), features["input_features"].shape[-1]), np.int64)
        for row, window in enumerate(windows):
            mask[row, : math.ceil(window.size / extractor.hop_length)] = 1
        tokens = self.audio_tokens(int(mask.sum()))
        if tokens < 1:
            raise MobiusError(
                f"an audio clip of {int(mask.sum())} feature frames is too short for one "
                "audio token"
            )
        return {"input_features": features["input_features"], "input_features_mask": mask}, tokens

    def with_audio(self, text: str, clip: np.ndarray) -> tuple[str, dict[str, np.ndarray]]:
        """The placeholder replaced by the clip's windows' tokens; their features and mask."""
        audio, tokens = self.audio_features(clip)
        before, after = text.split(self.audio_token)
        return before + self.replacement(tokens) + after, audio


class MusicFlamingoInputs(AudioFlamingo3Inputs):
    """``MusicFlamingoProcessor`` in numpy: Audio Flamingo 3's, 1200 s at most, the audio
    tokens between ``<|sound_bos|>`` and ``<|sound_eos|>``."""

    max_audio_seconds = 1200
    name = "Music Flamingo"
    audio_start, audio_end = "<|sound_bos|>", "<|sound_eos|>"

    def replacement(self, count: int) -> str:
        return self.audio_start + self.audio_token * count + self.audio_end
