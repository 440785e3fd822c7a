"""Audio files for ``mobius generate``: WAV, FLAC, OGG (Vorbis, Opus) and MP3 as float32 mono.

:func:`read_audio` does what a transformers user does before the feature extractor,
``librosa.load(path, sr=16000)``: decode with soundfile (libsndfile, whose wheels
carry FLAC, Ogg and MP3; no ffmpeg), average the channels and resample with soxr at
librosa's default quality (``soxr_hq``). Both libraries come with
``pip install mobius-audio[run]``. Without soundfile a PCM WAV is still read with the
standard library's ``wave``; without soxr the resampler is linear interpolation,
which has no anti-alias filter.
"""

from __future__ import annotations

import os
import wave
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError

FORMATS = "WAV, FLAC, OGG, MP3"
_PCM = {1: np.uint8, 2: np.int16, 4: np.int32}


def read_audio(path: str | os.PathLike, rate: int) -> np.ndarray:
    """The audio file at ``path`` as float32 mono samples at ``rate`` Hz.

    Raises :class:`MobiusError` naming the file when it is missing or cannot be decoded.
    """
    audio, source_rate = decode_audio(path)
    return resample(audio, source_rate, rate)


def decode_audio(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """``(samples, rate)``: the file's float32 samples in [-1, 1], channels averaged."""
    path = Path(path)
    if not path.exists():
        raise MobiusError(f"no such file: {path}")
    if path.is_dir():
        raise MobiusError(f"{path} is a directory, not an audio file ({FORMATS})")
    try:
        import soundfile
    except ImportError:  # the standard library still reads PCM WAV
        try:
            audio, rate = read_wav(path)
        except MobiusError:
            raise MobiusError(
                f"cannot decode {path} as audio ({FORMATS}): it is not a PCM WAV, and other "
                "formats need soundfile: pip install mobius-audio[run]"
            ) from None
    else:
        try:
            samples, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
        except (
            RuntimeError,
            OSError,
            ValueError,
            TypeError,
        ) as exc:  # LibsndfileError is a RuntimeError
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise MobiusError(f"cannot decode {path} as audio ({FORMATS}): {reason}") from None
        audio = samples.mean(axis=1, dtype=np.float32)
    if audio.size == 0:
        raise MobiusError(f"{path} holds no audio samples")
    return audio, int(rate)


def read_wav(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """``(samples, rate)``: a PCM WAV file (8/16/24/32-bit) as float32 mono in [-1, 1]."""
    try:
        with wave.open(str(path), "rb") as wav:
            rate, width, channels = wav.getframerate(), wav.getsampwidth(), wav.getnchannels()
            frames = wav.readframes(wav.getnframes())
    except (OSError, EOFError, wave.Error) as exc:
        raise MobiusError(f"cannot read {path} as a PCM WAV file: {exc}") from None
    raw = np.frombuffer(frames, np.uint8)
    if width == 3:  # 24-bit: widen each little-endian sample to int32
        raw = raw.reshape(-1, 3)
        samples = (raw[:, 0].astype(np.int32) | raw[:, 1].astype(np.int32) << 8) | (
            raw[:, 2].astype(np.int8).astype(np.int32) << 16
        )
        scale = float(1 << 23)
    elif width in _PCM:
        samples = np.frombuffer(frames, _PCM[width]).astype(np.float64)
        if width == 1:  # unsigned, centred on 128
            samples = samples - 128.0
        scale = float(1 << (8 * width - 1))
    else:
        raise MobiusError(f"{path}: {8 * width}-bit samples are not PCM that mobius reads")
    audio = (np.asarray(samples, np.float64) / scale).reshape(-1, channels).mean(axis=1)
    return audio.astype(np.float32), rate


def resample(audio: np.ndarray, rate: int, target: int) -> np.ndarray:
    """``audio`` at ``target`` Hz: soxr at librosa's default quality, else linear interpolation."""
    audio = np.asarray(audio, np.float32)
    if rate == target or audio.size == 0:
        return audio
    try:
        import soxr
    except ImportError:
        return resample_linear(audio, rate, target)
    return np.asarray(soxr.resample(audio, rate, target, quality="HQ"), np.float32)


def resample_linear(audio: np.ndarray, rate: int, target: int) -> np.ndarray:
    """``audio`` at ``target`` Hz by linear interpolation (no anti-alias filter: the fallback)."""
    if rate == target or audio.size == 0:
        return audio
    count = int(round(audio.size * target / rate))
    times = np.arange(count) * (rate / target)
    return np.interp(times, np.arange(audio.size), audio).astype(np.float32)
