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

import numpy as np

from mobius.errors import MobiusError
from mobius_audio.audioflamingo3_features import AudioFlamingo3Inputs

#: Consecutive encoder states stacked into one audio token.
MERGE = 4
#: ``--validate``'s window: the hub extractor's 30 s of 10 ms frames.
VALIDATION_FRAMES = 3000


class GlmAsrInputs(AudioFlamingo3Inputs):
    """``GlmAsrProcessor`` in numpy (module docstring), over a package's files; the processor
    :data:`mobius_audio.audio_language_processor.PROCESSORS` holds for ``glmasr``. Audio
    Flamingo 3's windows and placeholders, with GLM-ASR's limit, token count and message order."""

    #: transformers' ``GlmAsrProcessor.max_audio_len``: seconds of a clip it keeps.
    max_audio_seconds = 655
    default_audio_token = "<|pad|>"
    name = "GLM-ASR"

    @staticmethod
    def audio_tokens(frames: int) -> int:
        """The tokens the model makes of a clip of ``frames`` real feature frames."""
        states = (frames - 1) // 2 + 1  # conv2, stride 2
        return (states - MERGE) // MERGE + 1

    @staticmethod
    def user_content(prompt: str, audio: list[dict]) -> list[dict]:
        """The user message's items: the clip, then the text."""
        return [*audio, {"type": "text", "text": prompt}]


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
