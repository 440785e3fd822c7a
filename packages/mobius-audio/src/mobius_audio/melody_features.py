"""MusicGen-Melody's chroma features in numpy (``MusicgenMelodyFeatureExtractor`` needs torchaudio).

The steps of transformers' extractor: the clips are cut to ``chunk_length``
seconds and right-padded with ``padding_value`` to the longest; a clip shorter than
``n_fft`` is zero-padded on both sides to it; torchaudio's power spectrogram
(periodic Hann window of ``n_fft``, centred frames every ``hop_length`` samples,
reflection at the ends, scaled by the window's energy) goes through librosa's
chroma filter bank (``transformers.audio_utils.chroma_filter_bank``, tuning 0);
each frame keeps only its strongest pitch class, as a one-hot row. The result is
``input_features`` float32 [batch, frames, num_chroma], ``frames = samples //
hop_length + 1``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError

CONFIG_FILE = "preprocessor_config.json"


def _setting(config: dict, name: str, default: int, low: int, high: int) -> int:
    value = config.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise MobiusError(f"{CONFIG_FILE}: {name} {value!r} is not an integer in {low}..{high}")
    return value


class ChromaFeatureExtractor:
    """``input_features`` of mono clips at :attr:`sampling_rate`; see the module docstring."""

    def __init__(
        self,
        sampling_rate: int = 32000,
        n_fft: int = 16384,
        hop_length: int = 4096,
        chunk_length: int = 30,
        num_chroma: int = 12,
        padding_value: float = 0.0,
    ) -> None:
        from transformers.audio_utils import chroma_filter_bank  # numpy

        self.sampling_rate, self.n_fft, self.hop_length = sampling_rate, n_fft, hop_length
        self.max_samples = chunk_length * sampling_rate
        self.padding_value = float(padding_value)
        self.filters = chroma_filter_bank(
            num_frequency_bins=n_fft, num_chroma=num_chroma, sampling_rate=sampling_rate, tuning=0
        ).astype(np.float32)  # [num_chroma, n_fft // 2 + 1]
        steps = np.arange(n_fft)
        self.window = (0.5 - 0.5 * np.cos(2 * np.pi * steps / n_fft)).astype(np.float32)

    @classmethod
    def from_package(cls, package: Path) -> ChromaFeatureExtractor:
        """The extractor of a package's ``preprocessor_config.json``, its values checked."""
        path = Path(package) / CONFIG_FILE
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise MobiusError(f"cannot read {path}: {exc}") from None
        if not isinstance(config, dict):
            raise MobiusError(f"{path} is not a JSON object")
        padding = config.get("padding_value", 0.0)
        if isinstance(padding, bool) or not isinstance(padding, (int, float)):
            raise MobiusError(f"{CONFIG_FILE}: padding_value {padding!r} is not a number")
        return cls(
            sampling_rate=_setting(config, "sampling_rate", 32000, 1000, 384000),
            n_fft=_setting(config, "n_fft", 16384, 2, 1 << 20),
            hop_length=_setting(config, "hop_length", 4096, 1, 1 << 20),
            chunk_length=_setting(config, "chunk_length", 30, 1, 3600),
            num_chroma=_setting(config, "num_chroma", 12, 1, 128),
            padding_value=padding,
        )

    def power_spectrogram(self, samples: np.ndarray) -> np.ndarray:
        """``[batch, n_fft // 2 + 1, frames]``: torchaudio's ``Spectrogram(power=2, normalized=True)``."""
        half = self.n_fft // 2
        padded = np.pad(samples, ((0, 0), (half, half)), mode="reflect")
        frames = 1 + (padded.shape[1] - self.n_fft) // self.hop_length
        starts = np.arange(frames) * self.hop_length
        windows = padded[:, starts[:, None] + np.arange(self.n_fft)] * self.window
        spectrum = np.fft.rfft(windows, axis=-1)  # [batch, frames, bins]
        power = (spectrum.real**2 + spectrum.imag**2) / np.sum(self.window.astype(np.float64) ** 2)
        return power.transpose(0, 2, 1).astype(np.float32)

    def __call__(self, clips: list[np.ndarray]) -> np.ndarray:
        """float32 ``[batch, frames, num_chroma]`` one-hot rows of mono float ``clips``."""
        clips = [np.asarray(c, np.float32)[: self.max_samples] for c in clips]
        if any(c.ndim != 1 or not c.size for c in clips):
            raise MobiusError("a melody clip must be mono samples, at least one")
        longest = max(len(c) for c in clips)
        batch = np.full((len(clips), longest), self.padding_value, np.float32)
        for row, clip in zip(batch, clips, strict=True):
            row[: len(clip)] = clip
        if longest < self.n_fft:  # centred in zeros, the odd sample on the right
            pad = self.n_fft - longest
            batch = np.pad(batch, ((0, 0), (pad // 2, pad - pad // 2)))
        chroma = np.einsum("cf,bft->btc", self.filters, self.power_spectrogram(batch))
        features = np.zeros(chroma.shape, np.float32)
        np.put_along_axis(features, chroma.argmax(-1)[..., None], 1.0, axis=-1)
        return features
