"""Parakeet's feature extractor in numpy: what ``ParakeetFeatureExtractor`` computes with torch.

transformers' class needs torch (its STFT is ``torch.stft``); this one gives the
same ``input_features [batch, frames, mels]`` and ``attention_mask [batch, frames]``
(within 1e-5) from ``preprocessor_config.json``'s values:

1. each clip gets the preemphasis filter ``x[t] - preemphasis * x[t-1]`` (its first
   sample kept), then is zero-padded to the longest clip;
2. STFT: frames every ``hop_length`` samples over the clip zero-padded by
   ``n_fft // 2`` on each side (``center=True``, constant padding), a symmetric Hann
   window of ``win_length`` centred in ``n_fft``; the power spectrum;
3. the Slaney mel filter bank (``feature_size`` filters, 0 Hz to Nyquist), then
   ``log(mel + 2**-24)``;
4. per clip, over its ``length // hop_length`` real frames, each mel bin minus its
   mean, divided by its standard deviation (unbiased) plus 1e-5; padded frames 0.

Example::

    extractor = ParakeetFeatureExtractor.from_dict(json.load(open("preprocessor_config.json")))
    feeds = extractor([samples], sampling_rate=16000)  # input_features, attention_mask
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mobius.errors import MobiusError

LOG_GUARD = 2.0**-24  # added to the mel energies before the log, as NeMo does
STD_EPSILON = 1e-5  # added to the standard deviation

#: preprocessor_config.json's fields this extractor reads: name -> (default, lowest value).
_FIELDS = {
    "feature_size": (80, 1),
    "sampling_rate": (16000, 1),
    "hop_length": (160, 1),
    "n_fft": (512, 2),
    "win_length": (400, 1),
}


class ParakeetFeatureExtractor:
    """Log-mel features of 16 kHz mono audio, normalised per clip; see the module docstring."""

    return_attention_mask = True  # always: the batch is padded to its longest clip

    def __init__(
        self,
        feature_size: int = 80,
        sampling_rate: int = 16000,
        hop_length: int = 160,
        n_fft: int = 512,
        win_length: int = 400,
        preemphasis: float | None = 0.97,
    ) -> None:
        from transformers.audio_utils import mel_filter_bank  # numpy

        if win_length > n_fft:
            raise MobiusError(f"parakeet win_length={win_length} is longer than n_fft={n_fft}")
        self.feature_size, self.sampling_rate = feature_size, sampling_rate
        self.hop_length, self.n_fft, self.win_length = hop_length, n_fft, win_length
        self.preemphasis = preemphasis
        self.mel_filters = mel_filter_bank(
            num_frequency_bins=n_fft // 2 + 1,
            num_mel_filters=feature_size,
            min_frequency=0.0,
            max_frequency=sampling_rate / 2,
            sampling_rate=sampling_rate,
            norm="slaney",
            mel_scale="slaney",
        ).astype(np.float32)  # [bins, mels], float32 as transformers keeps it
        # torch.hann_window(periodic=False), zero-padded to n_fft on both sides as torch.stft does
        window = np.zeros(n_fft)
        left = (n_fft - win_length) // 2
        window[left : left + win_length] = np.hanning(win_length)
        self.window = window

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ParakeetFeatureExtractor:
        """From ``preprocessor_config.json``'s values, each checked (a stranger's file)."""
        kwargs = {}
        for name, (default, low) in _FIELDS.items():
            value = values.get(name, default)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= 1 << 20:
                raise MobiusError(f"preprocessor_config.json's {name} {value!r} is not a size")
            kwargs[name] = value
        preemphasis = values.get("preemphasis", 0.97)
        if preemphasis is not None and (
            not isinstance(preemphasis, (int, float))
            or isinstance(preemphasis, bool)
            or not 0.0 <= preemphasis < 1.0
        ):
            raise MobiusError(
                f"preprocessor_config.json's preemphasis {preemphasis!r} is not in [0, 1)"
            )
        return cls(**kwargs, preemphasis=preemphasis)

    def log_mel(self, clip: np.ndarray, samples: int) -> np.ndarray:
        """``[frames, mels]`` log-mel energies of ``clip`` zero-padded to ``samples``."""
        if self.preemphasis is not None:
            clip = np.concatenate([clip[:1], clip[1:] - np.float32(self.preemphasis) * clip[:-1]])
        padded = np.zeros(samples + 2 * (self.n_fft // 2), np.float64)
        padded[self.n_fft // 2 : self.n_fft // 2 + len(clip)] = clip
        frames = 1 + samples // self.hop_length
        starts = np.arange(frames)[:, None] * self.hop_length
        spectrum = np.fft.rfft(padded[starts + np.arange(self.n_fft)] * self.window, axis=-1)
        power = spectrum.real**2 + spectrum.imag**2  # [frames, bins]
        return np.log(power @ self.mel_filters.astype(np.float64) + LOG_GUARD)

    def __call__(
        self, clips, sampling_rate: int | None = None, **_options
    ) -> dict[str, np.ndarray]:
        """``input_features`` float32 ``[batch, frames, mels]`` and ``attention_mask`` int64.

        ``clips``: one array of mono samples or a list of them, at :attr:`sampling_rate`.
        Other keyword options (``return_tensors``, ``padding``...) are accepted and
        ignored: the batch is always padded to its longest clip, with its mask.
        """
        if sampling_rate is not None and sampling_rate != self.sampling_rate:
            raise MobiusError(
                f"audio at {sampling_rate} Hz given to a {self.sampling_rate} Hz feature extractor"
            )
        if isinstance(clips, np.ndarray) and clips.ndim == 1:
            clips = [clips]
        clips = [np.asarray(c, np.float32).reshape(-1) for c in clips]
        samples = max(len(c) for c in clips)
        lengths = np.array([len(c) // self.hop_length for c in clips])
        if lengths.min() < 2:
            raise MobiusError(
                f"a clip shorter than {2 * self.hop_length} samples has no frames to normalise"
            )
        features = np.stack([self.log_mel(c, samples) for c in clips])  # [batch, frames, mels]
        mask = np.arange(features.shape[1])[None, :] < lengths[:, None]
        real = mask[:, :, None]
        mean = (features * real).sum(1, keepdims=True) / lengths[:, None, None]
        variance = (((features - mean) * real) ** 2).sum(1, keepdims=True) / (lengths - 1)[
            :, None, None
        ]
        normalised = (features - mean) / (np.sqrt(variance) + STD_EPSILON) * real
        return {
            "input_features": normalised.astype(np.float32),
            "attention_mask": mask.astype(np.int64),
        }
