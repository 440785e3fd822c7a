"""What a speech LLM's transformers processor makes of a prompt and audio clips, without torch.

:class:`Qwen2AudioInputs` is ``Qwen2AudioProcessor``: each clip's Whisper log-mel
features (transformers' ``WhisperFeatureExtractor`` on its numpy path, with the
package's checked settings), padded to the extractor's window (``padding="max_length"``):
``input_features [clips, mel_bins, frames]`` and ``feature_attention_mask [clips,
frames]``, 1 for the frames of real samples (``ceil(samples / hop_length)``, the
extractor's sample mask read every ``hop_length``). The prompt goes through the chat
template (a user message of one audio item per clip, then the text) where the package
has one, else gets one ``<|audio_bos|><|AUDIO|><|audio_eos|>`` per clip in front unless it
holds ``<|AUDIO|>`` already; each ``<|AUDIO|>`` then becomes as many as the encoder makes
of the clip: ``((frames - 1) // 2 + 1 - 2) // 2 + 1``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius_audio.audio_prompts import check_placeholders, expand_placeholders, render_user_turn
from mobius_audio.audioflamingo3_features import AudioFlamingo3Inputs, MusicFlamingoInputs
from mobius_audio.glmasr_features import GlmAsrInputs
from mobius_audio.granite_speech_features import GraniteSpeechInputs
from mobius_audio.qwen3_asr_features import Qwen3AsrInputs

#: The Whisper feature extractor's settings read from preprocessor_config.json: (default, low, high).
FEATURE_INTS = {
    "feature_size": (128, 1, 1024),
    "sampling_rate": (16000, 1000, 192000),
    "hop_length": (160, 1, 1 << 16),
    "chunk_length": (30, 1, 3600),
    "n_fft": (400, 2, 1 << 16),
}


def _read_object(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MobiusError(f"cannot read {path}: {exc}") from None
    if not isinstance(value, dict):
        raise MobiusError(f"{path} does not hold a JSON object")
    return value


def whisper_feature_extractor(package_dir: Path):
    """transformers' ``WhisperFeatureExtractor`` with the package's preprocessor_config.json
    settings, each checked for type and range (the file is a stranger's)."""
    from transformers import WhisperFeatureExtractor

    settings = _read_object(package_dir / "preprocessor_config.json")
    kwargs = {}
    for name, (default, low, high) in FEATURE_INTS.items():
        value = settings.get(name, default)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise MobiusError(
                f"preprocessor_config.json: {name} is {value!r}, not in {low}..{high}"
            )
        kwargs[name] = value
    for name in ("padding_value", "dither"):
        value = settings.get(name, 0.0)
        if (
            not isinstance(value, (int, float))
            or isinstance(value, bool)
            or not math.isfinite(value)
        ):
            raise MobiusError(f"preprocessor_config.json: {name} is {value!r}, not a number")
        kwargs[name] = float(value)
    return WhisperFeatureExtractor(**kwargs)


class Qwen2AudioInputs:
    """``Qwen2AudioProcessor`` in numpy (module docstring), over a package's files."""

    audio_token = "<|AUDIO|>"
    audio_start, audio_end = "<|audio_bos|>", "<|audio_eos|>"

    def __init__(self, package_dir: Path, tokenizer, chat_template: str | None) -> None:
        self.package_dir = Path(package_dir)
        self.tokenizer = tokenizer
        self.template = chat_template
        self.feature_extractor = whisper_feature_extractor(package_dir)

    @property
    def sampling_rate(self) -> int:
        return int(self.feature_extractor.sampling_rate)

    @staticmethod
    def audio_tokens(frames: int) -> int:
        """The tokens the encoder makes of a clip of ``frames`` real feature frames."""
        return ((frames - 1) // 2 + 1 - 2) // 2 + 1

    def prompt_text(self, prompt: str, clips: int, *, chat_template: bool, system: str | None):
        """The text the processor tokenizes, before the placeholders are expanded."""
        if chat_template and self.template:
            audio = [{"type": "audio", "audio_url": f"clip{i}"} for i in range(clips)]
            return render_user_turn(self, [*audio, {"type": "text", "text": prompt}], system)
        if system is not None:
            raise MobiusError("a system message needs a chat template")
        if clips and self.audio_token not in prompt:
            return f"{self.audio_start}{self.audio_token}{self.audio_end}" * clips + prompt
        return prompt

    def audio_features(self, clips: list[np.ndarray]) -> dict[str, np.ndarray]:
        """``input_features`` and ``feature_attention_mask`` of float32 mono ``clips``."""
        from mobius_audio.generate import extract_inputs

        extractor = self.feature_extractor
        for clip in clips:
            if clip.size == 0:
                raise MobiusError("an audio clip holds no samples")
            if clip.size > extractor.n_samples:
                raise MobiusError(
                    f"an audio clip lasts {clip.size / extractor.sampling_rate:.1f} s; the "
                    f"model's window is {extractor.n_samples / extractor.sampling_rate:.0f} s"
                )
        options = dict(padding="max_length", truncation=False)
        features = extract_inputs(extractor, clips, self.sampling_rate, **options)
        features = features["input_features"]
        mask = np.zeros((len(clips), features.shape[-1]), np.int64)
        for row, clip in enumerate(clips):
            mask[row, : math.ceil(clip.size / extractor.hop_length)] = 1
        return {"input_features": features, "feature_attention_mask": mask}

    def __call__(
        self, prompt: str, clips: list, *, chat_template: bool = True, system: str | None = None
    ) -> dict[str, np.ndarray]:
        """``input_ids`` [1, sequence] and, with clips, their features and mask."""
        clips = [np.asarray(clip, np.float32).reshape(-1) for clip in clips]
        text = self.prompt_text(prompt, len(clips), chat_template=chat_template, system=system)
        check_placeholders(text, self.audio_token, len(clips))
        audio = self.audio_features(clips) if clips else {}
        if audio:
            frames = audio["feature_attention_mask"].sum(-1).tolist()
            counts = [self.audio_tokens(n) for n in frames]
            text = expand_placeholders(text, self.audio_token, counts)
        ids = np.asarray([self.tokenizer(text)["input_ids"]], np.int64)
        return {"input_ids": ids, **audio}


#: The processor of each speech-LLM model_type.
PROCESSORS = {
    "qwen2_audio": Qwen2AudioInputs,
    "granite_speech": GraniteSpeechInputs,
    "granite_speech_plus": GraniteSpeechInputs,
    "audioflamingo3": AudioFlamingo3Inputs,
    "musicflamingo": MusicFlamingoInputs,
    "glmasr": GlmAsrInputs,
    "qwen3_asr": Qwen3AsrInputs,
}
