"""Qwen3-ASR's feature extractor and processor in numpy (no torch).

:class:`Qwen3AsrFeatures` is ``Qwen3ASRFeatureExtractor`` on one clip, as the processor
calls it (``padding=True``: the clip's own length, no window): a clip shorter than
``min_length`` samples is zero-padded to it; a centred STFT (reflection padding, a
periodic Hann window of ``n_fft``), its power without the last frame, Slaney mel
filters from 0 to 8 kHz, ``log10`` floored at 1e-10, floored again at the clip's
maximum minus 8 and mapped by ``(x + 4) / 4``: ``samples // hop_length`` frames, then
zero frames up to a multiple of ``2 * n_window``. ``input_features_mask`` marks the
real frames.

:class:`Qwen3AsrInputs` is ``Qwen3ASRProcessor``: a clip of ``F`` real frames makes
``13`` tokens per full chunk of ``2 * n_window`` frames (three stride-2 convolutions:
100 -> 50 -> 25 -> 13) and those of its last partial chunk; the prompt goes through the
chat template where the package has one (a user message of one audio item, then the
text), else gets ``<|audio_start|><|audio_pad|><|audio_end|>`` in front unless it holds
the placeholder already, which then becomes that many. ``n_window`` is the model's
(``audio_config.n_window``), which the processor's ``n_window`` must match.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius_audio.audio_prompts import OneClipPrompt, expand_placeholders, render_user_turn

#: preprocessor_config.json's settings: (default, low, high).
SETTINGS = {
    "feature_size": (128, 1, 1024),
    "sampling_rate": (16000, 1000, 192000),
    "hop_length": (160, 1, 1 << 16),
    "n_fft": (400, 2, 1 << 16),
    "min_length": (8000, 0, 1 << 24),
}
#: ``--validate``'s clip: 30 s of 10 ms frames (the hub extractor's chunk_length).
VALIDATION_FRAMES = 3000


def _stride2(length: int) -> int:
    """The states a stride-2, kernel-3, padding-1 convolution makes of ``length``."""
    return (length - 1) // 2 + 1


def audio_tokens(frames: int, n_window: int) -> int:
    """The tokens the encoder makes of a clip of ``frames`` real feature frames."""
    chunk = 2 * n_window
    full, rest = divmod(frames, chunk)
    per_chunk = _stride2(_stride2(_stride2(chunk)))
    return full * per_chunk + (_stride2(_stride2(_stride2(rest))) if rest else 0)


def _positive(value, name: str, low: int = 1, high: int = 1 << 24) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise MobiusError(f"{name} is {value!r}, not in {low}..{high}")
    return value


class Qwen3AsrFeatures:
    """The extractor's checked settings and its math (module docstring).

    Example::

        features = Qwen3AsrFeatures({"feature_size": 128}, n_window=50)
        inputs = features(samples)  # input_features [1, 128, frames], input_features_mask
    """

    def __init__(self, settings: dict, n_window: int) -> None:
        from transformers.audio_utils import mel_filter_bank

        for name, (default, low, high) in SETTINGS.items():
            value = settings.get(name, default)
            setattr(self, name, _positive(value, f"preprocessor_config.json: {name}", low, high))
        dither = settings.get("dither", 0.0)
        if dither != 0:  # noise on every frame: no two runs would agree
            raise MobiusError(f"preprocessor_config.json: dither is {dither!r}; mobius needs 0")
        self.n_window = n_window
        n = np.arange(self.n_fft)
        self.window = 0.5 - 0.5 * np.cos(2 * np.pi * n / self.n_fft)  # periodic Hann
        self.filters = mel_filter_bank(
            num_frequency_bins=1 + self.n_fft // 2, num_mel_filters=self.feature_size,
            min_frequency=0.0, max_frequency=8000.0, sampling_rate=self.sampling_rate,
            norm="slaney", mel_scale="slaney",
        )  # fmt: skip  # [freqs, mels]

    def log_mel(self, samples: np.ndarray) -> np.ndarray:
        """``[mels, samples // hop_length]`` features of one clip."""
        half = self.n_fft // 2
        if samples.size <= half:
            raise MobiusError(f"an audio clip of {samples.size} samples is too short to analyse")
        padded = np.pad(samples.astype(np.float64), half, mode="reflect")
        count = samples.size // self.hop_length  # the STFT's last frame dropped
        index = np.arange(self.n_fft)[None, :] + self.hop_length * np.arange(count)[:, None]
        spectrum = np.fft.rfft(padded[index] * self.window, axis=-1)  # [frames, freqs]
        mel = ((spectrum.real**2 + spectrum.imag**2) @ self.filters).T  # [mels, frames]
        log = np.log10(np.maximum(mel, 1e-10))
        return (np.maximum(log, log.max() - 8.0) + 4.0) / 4.0

    def __call__(self, clip: np.ndarray) -> dict[str, np.ndarray]:
        """``input_features [1, mels, frames]`` (float32) and ``input_features_mask``."""
        if clip.size == 0:
            raise MobiusError("an audio clip holds no samples")
        if clip.size < self.min_length:
            clip = np.pad(clip, (0, self.min_length - clip.size))
        log = self.log_mel(clip)
        frames = log.shape[1]
        total = -(-frames // (2 * self.n_window)) * 2 * self.n_window
        features = np.zeros((1, self.feature_size, total), np.float32)
        features[0, :, :frames] = log
        mask = np.zeros((1, total), np.int64)
        mask[0, :frames] = 1
        return {"input_features": features, "input_features_mask": mask}


class Qwen3AsrInputs(OneClipPrompt):
    """``Qwen3ASRProcessor`` in numpy (module docstring), over a package's files; the
    processor :data:`mobius_audio.audio_language_processor.PROCESSORS` holds for ``qwen3_asr``."""

    name = "Qwen3-ASR"

    def __init__(self, package_dir: Path, tokenizer, chat_template: str | None) -> None:
        from mobius_audio.audio_language_processor import _read_object

        package_dir = Path(package_dir)
        self.package_dir = package_dir
        self.tokenizer = tokenizer
        self.template = chat_template
        audio = _read_object(package_dir / "config.json").get("audio_config")
        n_window = (audio if isinstance(audio, dict) else {}).get("n_window", 50)
        n_window = _positive(n_window, "config.json: audio_config.n_window")
        settings = _read_object(package_dir / "preprocessor_config.json")
        self.features = Qwen3AsrFeatures(settings, n_window)
        names = {
            "audio_token": "<|audio_pad|>",
            "audio_bos_token": "<|audio_start|>",
            "audio_eos_token": "<|audio_end|>",
        }
        for name, default in names.items():
            token = getattr(tokenizer, name, None)
            setattr(self, name, token if isinstance(token, str) and token else default)

    @property
    def sampling_rate(self) -> int:
        return self.features.sampling_rate

    def prompt_text(self, prompt: str, clips: int, *, chat_template: bool, system: str | None):
        """The text the processor tokenizes, before the placeholder is expanded."""
        if chat_template and self.template:
            audio = [{"type": "audio", "path": f"clip{i}.wav"} for i in range(clips)]
            content = [*audio, {"type": "text", "text": prompt}] if prompt else audio
            return render_user_turn(self, content, system)
        if system is not None:
            raise MobiusError("a system message needs a chat template")
        if clips and self.audio_token not in prompt:
            return f"{self.audio_bos_token}{self.audio_token}{self.audio_eos_token}" + prompt
        return prompt

    def with_audio(self, text: str, clip: np.ndarray) -> tuple[str, dict[str, np.ndarray]]:
        """The placeholder expanded to the clip's tokens; its features and mask."""
        audio = self.features(clip)
        count = audio_tokens(int(audio["input_features_mask"].sum()), self.features.n_window)
        return expand_placeholders(text, self.audio_token, [count]), audio


def validation_audio(config: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``mobius build --validate``'s audio for a Qwen3-ASR package: :data:`VALIDATION_FRAMES`
    frames (a multiple of ``2 * n_window``) uniform in [-1, 1], the first 60 % marked real."""
    audio = config.get("audio_config")
    audio = audio if isinstance(audio, dict) else {}
    mels = _positive(audio.get("num_mel_bins"), "--validate: audio_config.num_mel_bins")
    chunk = 2 * _positive(audio.get("n_window"), "--validate: audio_config.n_window")
    frames = -(-VALIDATION_FRAMES // chunk) * chunk
    features = rng.uniform(-1, 1, (1, mels, frames)).astype(np.float32)
    mask = np.zeros((1, frames), np.int64)
    mask[0, : int(frames * 0.6)] = 1
    return {"input_features": features, "input_features_mask": mask}
