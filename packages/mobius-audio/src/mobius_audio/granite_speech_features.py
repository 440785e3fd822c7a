"""Granite Speech's feature extractor and processor in numpy (no torch, no torchaudio).

:func:`log_mel_stacked` is ``GraniteSpeechFeatureExtractor``: the clips zero-padded to the
longest, torchaudio's ``MelSpectrogram`` (centred STFT with reflection padding, a periodic
Hann window of ``win_length`` centred in ``n_fft``, power 2, HTK mel filters without
normalisation), ``log10`` of the power floored at 1e-10, each clip floored at its maximum
minus 8 and mapped by ``x / 4 + 1``, the last frame dropped when their count is odd, and
pairs of frames stacked: ``input_features [clips, frames / 2, 2 * n_mels]``.

:class:`GraniteSpeechInputs` is ``GraniteSpeechProcessor``: each clip makes
``ceil((samples // hop + 1) // 2 / window) * (window // downsample)`` audio tokens
(``input_features_mask [clips, tokens]`` marks each clip's own), and each ``<|audio|>``
of the prompt becomes that many. The prompt goes through the package's chat template
(one user message: a ``<|audio|>`` per clip in front of the text unless it holds them
already), else gets the placeholders in front. A package whose build merged the
checkpoint's LoRA adapter (:mod:`mobius_audio.granite_speech_source`) refuses a prompt
without audio: transformers answers that with the adapter off, a decoder mobius did not build.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius.lora import read_merge_record
from mobius_audio.audio_prompts import check_placeholders, expand_placeholders, render_user_turn

#: preprocessor_config.json's settings: (default, low, high).
SETTINGS = {
    "sampling_rate": (16000, 1000, 192000),
    "n_fft": (512, 2, 1 << 16),
    "win_length": (400, 1, 1 << 16),
    "hop_length": (160, 1, 1 << 16),
    "n_mels": (80, 1, 1024),
    "projector_window_size": (15, 1, 1 << 16),
    "projector_downsample_rate": (5, 1, 1 << 16),
}


def _hz_to_mel(hz):
    return 2595.0 * np.log10(1.0 + np.asarray(hz, np.float64) / 700.0)


def _mel_to_hz(mel):
    return 700.0 * (10.0 ** (np.asarray(mel, np.float64) / 2595.0) - 1.0)


def mel_filters(n_freqs: int, n_mels: int, sampling_rate: int) -> np.ndarray:
    """torchaudio's ``melscale_fbanks`` (HTK, no norm, 0 Hz to Nyquist): ``[n_freqs, n_mels]``."""
    freqs = np.linspace(0, sampling_rate // 2, n_freqs)
    points = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(sampling_rate / 2), n_mels + 2))
    widths = np.diff(points)
    slopes = points[None, :] - freqs[:, None]
    down = -slopes[:, :-2] / widths[:-1]
    up = slopes[:, 2:] / widths[1:]
    return np.maximum(0.0, np.minimum(down, up))


class GraniteSpeechFeatures:
    """The extractor's settings (checked: preprocessor_config.json is a stranger's) and its math.

    Example::

        features = GraniteSpeechFeatures({"n_mels": 80})
        inputs = features([samples])  # input_features [1, frames, 160], input_features_mask
    """

    def __init__(self, settings: dict | None = None) -> None:
        settings = settings or {}
        for name, (default, low, high) in SETTINGS.items():
            value = settings.get(name, default)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise MobiusError(
                    f"preprocessor_config.json: {name} is {value!r}, not in {low}..{high}"
                )
            setattr(self, name, value)
        if self.win_length > self.n_fft:
            raise MobiusError("preprocessor_config.json: win_length exceeds n_fft")
        n = np.arange(self.win_length)
        hann = 0.5 - 0.5 * np.cos(2 * np.pi * n / self.win_length)  # periodic
        left = (self.n_fft - self.win_length) // 2
        self.window = np.zeros(self.n_fft)
        self.window[left : left + self.win_length] = hann
        self.filters = mel_filters(self.n_fft // 2 + 1, self.n_mels, self.sampling_rate)

    @classmethod
    def from_package(cls, package_dir: Path) -> GraniteSpeechFeatures:
        path = Path(package_dir) / "preprocessor_config.json"
        try:
            settings = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise MobiusError(f"cannot read {path}: {exc}") from None
        if not isinstance(settings, dict):
            raise MobiusError(f"{path} does not hold a JSON object")
        # transformers saves the STFT settings under melspec_kwargs (torchaudio's names)
        melspec = settings.get("melspec_kwargs", {})
        if not isinstance(melspec, dict):
            raise MobiusError(f"{path}: melspec_kwargs is {melspec!r}, not an object")
        spectrogram = {"sampling_rate": melspec.get("sample_rate", settings.get("sampling_rate"))}
        for name in ("n_fft", "win_length", "hop_length", "n_mels"):
            spectrogram[name] = melspec.get(name, settings.get(name))
        given = {k: v for k, v in {**settings, **spectrogram}.items() if v is not None}
        return cls({name: given[name] for name in SETTINGS if name in given})

    def power_mel(self, samples: np.ndarray) -> np.ndarray:
        """``[frames, n_mels]`` mel power of one (padded) clip."""
        half = self.n_fft // 2
        if samples.size <= half:
            raise MobiusError(f"an audio clip of {samples.size} samples is too short to analyse")
        padded = np.pad(samples.astype(np.float64), half, mode="reflect")
        count = 1 + samples.size // self.hop_length
        index = np.arange(self.n_fft)[None, :] + self.hop_length * np.arange(count)[:, None]
        spectrum = np.fft.rfft(padded[index] * self.window, axis=-1)
        return (spectrum.real**2 + spectrum.imag**2) @ self.filters

    def log_mel_stacked(self, clips: list[np.ndarray]) -> np.ndarray:
        """``input_features [clips, frames / 2, 2 * n_mels]`` float32 (module docstring)."""
        longest = max(clip.size for clip in clips)
        rows = []
        for clip in clips:
            padded = np.zeros(longest, np.float64)
            padded[: clip.size] = clip
            log = np.log10(np.maximum(self.power_mel(padded), 1e-10))
            log = np.maximum(log, log.max() - 8.0) / 4 + 1
            frames = log.shape[0] - log.shape[0] % 2
            rows.append(log[:frames].reshape(frames // 2, 2 * self.n_mels))
        return np.stack(rows).astype(np.float32)

    def audio_tokens(self, samples: int) -> int:
        """How many projected tokens the model makes of a clip of ``samples``."""
        frames = (samples // self.hop_length + 1) // 2
        windows = math.ceil(frames / self.projector_window_size)
        return windows * (self.projector_window_size // self.projector_downsample_rate)

    def __call__(self, clips: list[np.ndarray]) -> dict[str, np.ndarray]:
        """``input_features`` and ``input_features_mask`` (int64) of float32 mono clips."""
        for clip in clips:
            if clip.size == 0:
                raise MobiusError("an audio clip holds no samples")
        counts = [self.audio_tokens(clip.size) for clip in clips]
        mask = (np.arange(max(counts))[None, :] < np.asarray(counts)[:, None]).astype(np.int64)
        return {"input_features": self.log_mel_stacked(clips), "input_features_mask": mask}


class GraniteSpeechInputs:
    """``GraniteSpeechProcessor`` in numpy (module docstring), over a package's files; the
    processor :data:`mobius_audio.audio_language_processor.PROCESSORS` holds for it."""

    def __init__(self, package_dir: Path, tokenizer, chat_template: str | None) -> None:
        self.package_dir = Path(package_dir)
        self.tokenizer = tokenizer
        self.template = chat_template
        self.features = GraniteSpeechFeatures.from_package(Path(package_dir))
        #: The build merged the LoRA adapter (mobius_audio.granite_speech_source).
        self.adapter_merged = read_merge_record(package_dir) is not None
        token = getattr(tokenizer, "audio_token", None)
        self.audio_token = token if isinstance(token, str) and token else "<|audio|>"

    @property
    def sampling_rate(self) -> int:
        return self.features.sampling_rate

    def prompt_text(self, prompt: str, clips: int, *, chat_template: bool, system: str | None):
        """The text the processor tokenizes, before the placeholders are expanded."""
        if clips and self.audio_token not in prompt:
            prompt = self.audio_token * clips + prompt
        if chat_template and self.template:
            return render_user_turn(self, prompt, system)
        if system is not None:
            raise MobiusError("a system message needs a chat template")
        return prompt

    def __call__(
        self, prompt: str, clips: list, *, chat_template: bool = True, system: str | None = None
    ) -> dict[str, np.ndarray]:
        """``input_ids`` [1, sequence] and, with clips, ``input_features`` and its mask."""
        if not clips and self.adapter_merged:
            raise MobiusError(
                "this Granite Speech package has the checkpoint's LoRA adapter merged into its "
                "text decoder, which transformers turns on only when audio is given: a "
                "text-only prompt would not get its answer; give --audio FILE"
            )
        clips = [np.asarray(clip, np.float32).reshape(-1) for clip in clips]
        text = self.prompt_text(prompt, len(clips), chat_template=chat_template, system=system)
        check_placeholders(text, self.audio_token, len(clips))
        audio = self.features(clips) if clips else {}
        if audio:
            counts = audio["input_features_mask"].sum(-1)
            text = expand_placeholders(text, self.audio_token, counts)
        ids = np.asarray([self.tokenizer(text)["input_ids"]], np.int64)
        return {"input_ids": ids, **audio}


def validation_audio(config: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``mobius build --validate``'s audio for a Granite Speech package: two seconds (100 stacked
    frames) of features uniform in [-1, 1] and the mask of every projected token (bool, as
    transformers indexes with it; the graph takes it as int64)."""
    encoder = config.get("encoder_config")
    if not isinstance(encoder, dict):
        raise MobiusError("--validate: config.json has no encoder_config")
    sizes = {
        "input_dim": encoder.get("input_dim"),
        "window_size": config.get("window_size"),
        "downsample_rate": config.get("downsample_rate"),
    }
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise MobiusError(f"--validate: config.json's {name} is {value!r}, not a positive int")
    frames = 100
    tokens = math.ceil(frames / sizes["window_size"]) * (
        sizes["window_size"] // sizes["downsample_rate"]
    )
    features = rng.uniform(-1, 1, (1, frames, sizes["input_dim"])).astype(np.float32)
    return {"input_features": features, "input_features_mask": np.ones((1, tokens), bool)}
