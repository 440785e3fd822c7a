"""``ASTFeatureExtractor`` without torch: Kaldi-style log-mel fbank frames in numpy.

transformers' AST extractor takes torchaudio's ``compliance.kaldi.fbank`` when
torchaudio is installed and its numpy path otherwise; both need torch for the
padding. This is the numpy path, in numpy only: 25 ms Hann frames (transformers asks
Kaldi for "hanning", not its default Povey window) every 10 ms without centring, DC
offset removed, pre-emphasis 0.97, a 512-point power spectrum, Kaldi mel banks from
20 Hz to Nyquist (triangular in mel space), the log clamped at float32's epsilon; no
dither. Each clip's frames are then zero-padded or cut to ``max_length`` and, with
``do_normalize``, mapped to ``(x - mean) / (2 * std)``. The frame sizes are counted in
samples, as transformers' numpy path counts them (25 ms and 10 ms at 16 kHz, the AST
checkpoints' rate). A clip shorter than one frame is zero-padded to one (transformers
fails on it). Equal to transformers' within 1e-5 (``tests/test_ast_features.py``).

Example::

    from mobius_audio.ast_features import ASTFeatures

    features = ASTFeatures.from_package("ast-out/")  # its preprocessor_config.json
    input_values = features.input_values([samples])  # float32 [1, max_length, num_mel_bins]
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius.generate import PackageError, _read_json

FRAME_LENGTH, HOP_LENGTH, FFT_LENGTH = 400, 160, 512  # samples, as transformers' numpy path
LOG_FLOOR = 1.192092955078125e-07  # float32 epsilon, Kaldi's
PREEMPHASIS = 0.97
LOWEST_FREQUENCY = 20


def _number(config: dict, key: str, default, kinds, low, high):
    value = config.get(key, default)
    if not isinstance(value, kinds) or isinstance(value, bool) or not low <= value <= high:
        raise PackageError(f"preprocessor_config.json's {key} {value!r} is out of range")
    return value


class ASTFeatures:
    """The AST extractor of one ``preprocessor_config.json``: clips -> ``input_values``."""

    def __init__(
        self,
        sampling_rate: int = 16000,
        num_mel_bins: int = 128,
        max_length: int = 1024,
        do_normalize: bool = True,
        mean: float = -4.2677393,
        std: float = 4.5689974,
    ) -> None:
        from transformers.audio_utils import mel_filter_bank, window_function  # numpy

        self.sampling_rate, self.num_mel_bins, self.max_length = (
            sampling_rate,
            num_mel_bins,
            max_length,
        )
        self.do_normalize, self.mean, self.std = do_normalize, mean, std
        self.mel_filters = mel_filter_bank(
            num_frequency_bins=FFT_LENGTH // 2 + 1,
            num_mel_filters=num_mel_bins,
            min_frequency=LOWEST_FREQUENCY,
            max_frequency=sampling_rate // 2,
            sampling_rate=sampling_rate,
            norm=None,
            mel_scale="kaldi",
            triangularize_in_mel_space=True,
        )
        self.window = window_function(FRAME_LENGTH, "hann", periodic=False)

    @classmethod
    def from_package(cls, package_dir: str | os.PathLike) -> ASTFeatures:
        """The extractor of a package's ``preprocessor_config.json``."""
        path = Path(package_dir) / "preprocessor_config.json"
        if not path.is_file():
            raise PackageError(
                f"no preprocessor_config.json in {package_dir}: AST needs its extractor"
            )
        return cls.from_dict(_read_json(path))

    @classmethod
    def from_dict(cls, config: dict) -> ASTFeatures:
        """The extractor ``preprocessor_config.json``'s values describe, each checked."""
        std = _number(config, "std", 4.5689974, (int, float), -1e6, 1e6)
        if std == 0:
            raise PackageError("preprocessor_config.json's std is 0")
        normalize = config.get("do_normalize", True)
        if not isinstance(normalize, bool):
            raise PackageError(
                f"preprocessor_config.json's do_normalize {normalize!r} is not a bool"
            )
        return cls(
            sampling_rate=_number(config, "sampling_rate", 16000, int, 1000, 1_000_000),
            num_mel_bins=_number(config, "num_mel_bins", 128, int, 1, FFT_LENGTH // 2),
            max_length=_number(config, "max_length", 1024, int, 1, 1_000_000),
            do_normalize=normalize,
            mean=float(_number(config, "mean", -4.2677393, (int, float), -1e6, 1e6)),
            std=float(std),
        )

    def fbank(self, samples: np.ndarray) -> np.ndarray:
        """``[frames, num_mel_bins]`` log-mel frames of one clip (at least one frame's samples)."""
        from transformers.audio_utils import spectrogram  # numpy

        samples = np.asarray(samples, np.float32).reshape(-1)
        if samples.size < FRAME_LENGTH:  # transformers' would fail on an empty frame list
            samples = np.pad(samples, (0, FRAME_LENGTH - samples.size))
        return spectrogram(
            samples,
            self.window,
            frame_length=FRAME_LENGTH,
            hop_length=HOP_LENGTH,
            fft_length=FFT_LENGTH,
            power=2.0,
            center=False,
            preemphasis=PREEMPHASIS,
            mel_filters=self.mel_filters,
            log_mel="log",
            mel_floor=LOG_FLOOR,
            remove_dc_offset=True,
        ).T

    def input_values(self, clips: Sequence[np.ndarray]) -> np.ndarray:
        """``input_values`` float32 ``[len(clips), max_length, num_mel_bins]``."""
        out = np.zeros((len(clips), self.max_length, self.num_mel_bins), np.float32)
        for row, clip in zip(out, clips, strict=True):
            frames = self.fbank(clip)[: self.max_length]
            row[: len(frames)] = frames
        if self.do_normalize:
            out = ((out - self.mean) / (self.std * 2)).astype(np.float32)
        return out

    def __call__(self, raw_speech, sampling_rate: int | None = None, **_options) -> dict:
        """As transformers' extractor is called (the runners' ``extract_inputs``): one clip or a
        list of clips at the extractor's rate -> ``{"input_values": ...}``; padding options
        are moot, the window is fixed."""
        if sampling_rate is not None and sampling_rate != self.sampling_rate:
            raise MobiusError(
                f"AST features take {self.sampling_rate} Hz audio, not {sampling_rate}"
            )
        single = isinstance(raw_speech, np.ndarray) and raw_speech.ndim == 1
        clips = [raw_speech] if single else list(raw_speech)
        return {"input_values": self.input_values(clips)}
