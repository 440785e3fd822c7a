"""GLM-ASR's processor in numpy (no torch): what ``GlmAsrProcessor`` makes of a prompt and clips.

Each clip is cut into windows of the Whisper extractor's ``chunk_length`` (at least one,
at most ``655 // chunk_length``: transformers' ``max_audio_len`` of 655 s, the rest
dropped), and every window goes through the extractor (the package's checked
preprocessor_config.json, :func:`~mobius_audio.audio_language_processor.whisper_feature_extractor`)
padded to the full window: ``input_features [windows, mel_bins, frames]`` and
``input_features_mask [windows, frames]``, 1 for the frames of real samples
(``ceil(samples / hop_length)``). A clip of ``F`` real frames over all its windows makes
``((F - 1) // 2 + 1) // 4`` audio tokens (conv2's stride 2, four states a token).
The prompt goes through the chat template where the package has one (a user message of
one audio item per clip, then the text), else gets one audio placeholder per clip in
front unless it holds them already; each placeholder (the token of ``audio_token_id``,
``<|pad|>`` on the hub) then becomes that clip's token count.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius_audio.audio_prompts import check_placeholders, expand_placeholders

#: transformers' ``GlmAsrProcessor.max_audio_len``: seconds of a clip it keeps.
MAX_AUDIO_SECONDS = 655
#: Consecutive encoder states stacked into one audio token.
MERGE = 4
#: ``--validate``'s window: the hub extractor's 30 s of 10 ms frames.
VALIDATION_FRAMES = 3000


class GlmAsrInputs:
    """``GlmAsrProcessor`` in numpy (module docstring), over a package's files; the processor
    :data:`mobius_audio.audio_language_processor.PROCESSORS` holds for ``glmasr``."""

    def __init__(self, package_dir: Path, tokenizer, chat_template: str | None) -> None:
        from mobius_audio.audio_language_processor import _read_object, whisper_feature_extractor

        self.tokenizer = tokenizer
        self.template = chat_template
        self.feature_extractor = whisper_feature_extractor(Path(package_dir))
        config = _read_object(Path(package_dir) / "config.json")
        token_id = config.get("audio_token_id")
        token = None
        if isinstance(token_id, int) and not isinstance(token_id, bool) and token_id >= 0:
            token = tokenizer.convert_ids_to_tokens(token_id)
        self.audio_token = token if isinstance(token, str) and token else "<|pad|>"

    @property
    def sampling_rate(self) -> int:
        return int(self.feature_extractor.sampling_rate)

    @staticmethod
    def audio_tokens(frames: int) -> int:
        """The tokens the model makes of a clip of ``frames`` real feature frames."""
        states = (frames - 1) // 2 + 1  # conv2, stride 2
        return (states - MERGE) // MERGE + 1

    def prompt_text(self, prompt: str, clips: int, *, chat_template: bool, system: str | None):
        """The text the processor tokenizes, before the placeholders are expanded."""
        if chat_template and self.template:
            audio = [{"type": "audio", "path": f"clip{i}.wav"} for i in range(clips)]
            messages = [{"role": "user", "content": [*audio, {"type": "text", "text": prompt}]}]
            if system is not None:
                messages.insert(0, {"role": "system", "content": system})
            return self.tokenizer.apply_chat_template(
                messages, chat_template=self.template, tokenize=False, add_generation_prompt=True
            )
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
        most = max(1, MAX_AUDIO_SECONDS // int(self.feature_extractor.chunk_length))
        count = min(most, math.ceil(clip.size / size))
        return [clip[i * size : (i + 1) * size] for i in range(count)]

    def audio_features(self, clips: list[np.ndarray]) -> tuple[dict[str, np.ndarray], list[int]]:
        """``input_features`` and ``input_features_mask`` of the clips' windows, and each
        clip's audio token count."""
        from mobius_audio.generate import extract_inputs

        extractor = self.feature_extractor
        cut = [self.windows(clip) for clip in clips]
        flat = [window for windows in cut for window in windows]
        options = dict(padding="max_length", truncation=False)
        features = extract_inputs(extractor, flat, self.sampling_rate, **options)
        mask = np.zeros((len(flat), features["input_features"].shape[-1]), np.int64)
        for row, window in enumerate(flat):
            mask[row, : math.ceil(window.size / extractor.hop_length)] = 1
        counts, row = [], 0
        for windows in cut:
            frames = int(mask[row : row + len(windows)].sum())
            row += len(windows)
            tokens = self.audio_tokens(frames)
            if tokens < 1:
                raise MobiusError(
                    f"an audio clip of {frames} feature frames is too short for one audio token"
                )
            counts.append(tokens)
        audio = {"input_features": features["input_features"], "input_features_mask": mask}
        return audio, counts

    def __call__(
        self, prompt: str, clips: list, *, chat_template: bool = True, system: str | None = None
    ) -> dict[str, np.ndarray]:
        """``input_ids`` [1, sequence] and, with clips, their windows' features and mask."""
        if len(clips) > 1:  # transformers' GlmAsrProcessor pairs each text with one clip
            raise MobiusError(f"GLM-ASR takes one audio clip a prompt, not {len(clips)}")
        clips = [np.asarray(clip, np.float32).reshape(-1) for clip in clips]
        text = self.prompt_text(prompt, len(clips), chat_template=chat_template, system=system)
        check_placeholders(text, self.audio_token, len(clips))
        audio = {}
        if clips:
            audio, counts = self.audio_features(clips)
            text = expand_placeholders(text, self.audio_token, counts)
        ids = np.asarray([self.tokenizer(text)["input_ids"]], np.int64)
        return {"input_ids": ids, **audio}


def validation_audio(config: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``mobius build --validate``'s audio for a GLM-ASR package: one window of
    :data:`VALIDATION_FRAMES` frames uniform in [-1, 1] (the encoder has no position table,
    so no config field bounds it), the first 60 % of them marked real."""
    audio = config.get("audio_config")
    mels = audio.get("num_mel_bins") if isinstance(audio, dict) else None
    if not isinstance(mels, int) or isinstance(mels, bool) or mels < 1:
        raise MobiusError(f"--validate: config.json's audio_config.num_mel_bins is {mels!r}")
    features = rng.uniform(-1, 1, (1, mels, VALIDATION_FRAMES)).astype(np.float32)
    mask = np.zeros((1, VALIDATION_FRAMES), np.int64)
    mask[0, : int(VALIDATION_FRAMES * 0.6)] = 1
    return {"input_features": features, "input_features_mask": mask}
