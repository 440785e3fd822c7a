"""CLAP's log-mel features without torch: ``ClapFeatureExtractor`` in numpy.

transformers' ``ClapFeatureExtractor`` requires torch (its ``fusion`` truncation shrinks
the mel spectrogram with ``torch.nn.functional.interpolate``). This module makes the
same ``input_features`` (and ``is_longer``) from the package's
``preprocessor_config.json``, with transformers' numpy STFT (``transformers.audio_utils``:
Hann window, power spectrum, mel filters, dB) and a numpy bilinear shrink.

A clip no longer than ``max_length_s`` is padded to it by ``padding``: ``repeatpad``
(repeated whole, then zeros), ``repeat`` (repeated and cut) or ``pad`` (zeros). A
longer clip, by ``truncation``:

- ``rand_trunc`` (unfused checkpoints; Slaney mel filters): cut to the window at a
  random offset; ``input_features`` [batch, 1, frames, mel_bins];
- ``fusion`` (fused checkpoints; HTK mel filters): the whole clip's spectrogram shrunk
  to the window (bilinear, as torch), then three crops at random offsets in its front,
  middle and back thirds; ``input_features`` [batch, 4, frames, mel_bins] (a clip that
  fits has its one spectrogram four times) and ``is_longer`` [batch, 1] (True where
  cropped; when no clip is, transformers marks one at random, and so does this).

The random draws are transformers' own (``numpy.random``'s global generator, in the
same order): seed it for repeatable scores. Features are the same every run only for
clips no longer than ``max_length_s`` (unfused), or one such clip (fused).

Example::

    from mobius_audio.clap_features import ClapFeatures

    features = ClapFeatures.from_package("clap-out/")
    feeds = features([wave_a, wave_b])  # {"input_features": float32 [2, 1, frames, mel_bins]}
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius.generate import PackageError, _read_json

PADDINGS = ("repeatpad", "repeat", "pad")
TRUNCATIONS = ("rand_trunc", "fusion")
#: transformers shrinks a long clip's spectrogram to this many mel bins, whatever its own.
FUSION_MEL_BINS = 64


def _positive(config: dict, key: str, default, kind=(int,)):
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
        raise PackageError(
            f"preprocessor_config.json: {key} must be a positive number, not {value!r}"
        )
    return value


class ClapFeatures:
    """``ClapFeatureExtractor``'s log-mel spectrograms, in numpy (see the module docstring)."""

    def __init__(
        self,
        *,
        feature_size: int = 64,
        sampling_rate: int = 48_000,
        hop_length: int = 480,
        max_length_s: int = 10,
        fft_window_size: int = 1024,
        frequency_min: float = 0.0,
        frequency_max: float = 14_000.0,
        padding: str = "repeatpad",
        truncation: str = "rand_trunc",
    ) -> None:
        from transformers.audio_utils import mel_filter_bank, window_function

        if padding not in PADDINGS:
            raise MobiusError(f"CLAP padding {padding!r} is not one of {', '.join(PADDINGS)}")
        if truncation not in TRUNCATIONS:
            raise MobiusError(
                f"CLAP truncation {truncation!r} is not one of {', '.join(TRUNCATIONS)}"
            )
        self.fused = truncation == "fusion"
        if self.fused and feature_size != FUSION_MEL_BINS:
            raise MobiusError(
                f"CLAP fusion features need {FUSION_MEL_BINS} mel bins (transformers shrinks "
                f"long clips to that many), not {feature_size}"
            )
        self.sampling_rate, self.hop_length = sampling_rate, hop_length
        self.fft_window_size, self.padding = fft_window_size, padding
        self.max_samples = max_length_s * sampling_rate
        self.window = window_function(fft_window_size, "hann")
        self.mel_filters = mel_filter_bank(
            num_frequency_bins=(fft_window_size >> 1) + 1,
            num_mel_filters=feature_size,
            min_frequency=frequency_min,
            max_frequency=frequency_max,
            sampling_rate=sampling_rate,
            norm=None if self.fused else "slaney",
            mel_scale="htk" if self.fused else "slaney",
        )

    @classmethod
    def from_package(cls, package_dir: str | os.PathLike) -> ClapFeatures:
        """The extractor ``preprocessor_config.json`` describes (every value checked)."""
        path = Path(package_dir) / "preprocessor_config.json"
        if not path.is_file():
            raise PackageError(f"{package_dir} has no preprocessor_config.json (CLAP's features)")
        config = _read_json(path)
        if not isinstance(config, dict):
            raise PackageError(f"{path} is not a JSON object")
        truncation = config.get("truncation", "fusion")
        if truncation not in TRUNCATIONS:
            raise PackageError(f"{path}: truncation {truncation!r} is not one of {TRUNCATIONS}")
        number = (int, float)
        padding = config.get("padding", "repeatpad")
        if not isinstance(padding, str):
            raise PackageError(f"{path}: padding must be a string, not {padding!r}")
        frequency_min = config.get("frequency_min", 0)
        if isinstance(frequency_min, bool) or not isinstance(frequency_min, number):
            raise PackageError(f"{path}: frequency_min must be a number, not {frequency_min!r}")
        return cls(
            feature_size=_positive(config, "feature_size", 64),
            sampling_rate=_positive(config, "sampling_rate", 48_000),
            hop_length=_positive(config, "hop_length", 480),
            max_length_s=_positive(config, "max_length_s", 10),
            fft_window_size=_positive(config, "fft_window_size", 1024),
            frequency_min=float(frequency_min),
            frequency_max=float(_positive(config, "frequency_max", 14_000, number)),
            padding=padding,
            truncation=truncation,
        )

    @property
    def frames(self) -> int:
        """The frames of every clip's spectrogram (the STFT is centred: one more than hops)."""
        return self.max_samples // self.hop_length + 1

    def fit(self, wave: np.ndarray) -> np.ndarray:
        """``wave`` padded (by ``padding``) or cut (at a random offset) to ``max_samples``."""
        limit = self.max_samples
        if len(wave) > limit:
            # transformers' draw, from the same generator
            offset = np.random.randint(0, len(wave) - limit + 1)
            return wave[offset : offset + limit]
        return self.pad(wave)

    def pad(self, wave: np.ndarray) -> np.ndarray:
        """A clip no longer than ``max_samples`` padded to it by ``padding``."""
        limit = self.max_samples
        if len(wave) < limit:
            if self.padding == "repeat":
                wave = np.tile(wave, limit // len(wave) + 1)[:limit]
            elif self.padding == "repeatpad":
                wave = np.tile(wave, limit // len(wave))
        return np.pad(wave, (0, limit - len(wave)))

    def log_mel(self, wave: np.ndarray) -> np.ndarray:
        """``[frames, mel_bins]``: the dB power mel spectrogram of a clip."""
        from transformers.audio_utils import spectrogram

        mel = spectrogram(
            wave,
            self.window,
            frame_length=self.fft_window_size,
            hop_length=self.hop_length,
            power=2.0,
            mel_filters=self.mel_filters,
            log_mel="dB",
        )
        return mel.T

    def fused_mels(self, wave: np.ndarray) -> tuple[np.ndarray, bool]:
        """``([4, frames, mel_bins], is_longer)``: the whole clip shrunk and three crops, or
        the padded clip four times."""
        if len(wave) <= self.max_samples:
            return np.stack([self.log_mel(self.pad(wave))] * 4), False
        mel = self.log_mel(wave)
        chunk, total = self.frames, len(mel)
        if chunk == total:  # longer by less than a hop: the whole clip fits the window
            return np.stack([mel] * 4), False
        thirds = np.array_split(list(range(0, total - chunk + 1)), 3)
        # transformers' draws, in its order (an empty third draws from [0] all the same)
        starts = [np.random.choice(third if len(third) else [0]) for third in thirds]
        crops = [mel[start : start + chunk] for start in starts]
        return np.stack([shrink_rows(mel, chunk), *crops]), True

    def __call__(self, waves: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        """The graph's audio inputs for mono clips at ``sampling_rate``: ``input_features``
        float32, and for fusion ``is_longer`` bool [batch, 1]."""
        clips = []
        for wave in waves:
            wave = np.asarray(wave, np.float64)
            if wave.ndim != 1 or wave.size == 0:
                raise MobiusError(f"CLAP takes non-empty mono clips, not shape {list(wave.shape)}")
            clips.append(wave)
        if not self.fused:
            mels = [self.log_mel(self.fit(wave))[None] for wave in clips]
            return {"input_features": np.stack(mels).astype(np.float32)}
        mels, longer = zip(*(self.fused_mels(wave) for wave in clips), strict=True)
        longer = list(longer)
        if not any(longer):  # transformers marks one clip at random
            longer[np.random.randint(0, len(longer))] = True
        return {
            "input_features": np.stack(mels).astype(np.float32),
            "is_longer": np.asarray(longer, bool)[:, None],
        }


def shrink_rows(mel: np.ndarray, rows: int) -> np.ndarray:
    """``mel`` [total, bins] resized to ``rows`` rows as torch's bilinear ``interpolate``
    (``align_corners=False``) does it in float32; the bins stay as they are."""
    mel = np.asarray(mel, np.float32)
    total = len(mel)
    scale = np.float32(total) / np.float32(rows)
    source = scale * (np.arange(rows, dtype=np.float32) + np.float32(0.5)) - np.float32(0.5)
    source = np.maximum(source, np.float32(0))
    first = np.minimum(np.floor(source).astype(np.int64), total - 1)
    weight = np.clip(source - first.astype(np.float32), 0, 1)[:, None]
    second = np.where(first < total - 1, first + 1, first)
    return (np.float32(1) - weight) * mel[first] + weight * mel[second]
