"""Reading PCM WAV with the standard library (mobius without soundfile): widths, channels, linear resampling."""

from __future__ import annotations

import wave

import numpy as np
import pytest

from mobius.errors import MobiusError
from mobius_audio.audio_file import read_wav, resample_linear


def _write(path, frames: bytes, width: int, channels: int = 1, rate: int = 16000) -> None:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(channels)
        wav.setsampwidth(width)
        wav.setframerate(rate)
        wav.writeframes(frames)


@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_pcm_widths_read_as_float_mono(tmp_path, width):
    values = np.array([0.0, 0.5, -0.5, 0.25])
    scale = 1 << (8 * width - 1)
    ints = np.round(values * scale).astype(np.int64)
    if width == 1:
        frames = (ints + 128).astype(np.uint8).tobytes()
    else:  # little-endian two's complement, ``width`` bytes a sample
        frames = b"".join(int(v).to_bytes(width, "little", signed=True) for v in ints)
    _write(tmp_path / "a.wav", frames, width)
    audio, rate = read_wav(tmp_path / "a.wav")
    assert rate == 16000 and audio.dtype == np.float32
    np.testing.assert_allclose(audio, values, atol=1 / scale)


def test_channels_are_averaged(tmp_path):
    stereo = np.array([[1000, 3000], [-2000, 0]], "<i2")
    _write(tmp_path / "s.wav", stereo.tobytes(), 2, channels=2)
    audio, _ = read_wav(tmp_path / "s.wav")
    np.testing.assert_allclose(audio, [2000 / 32768, -1000 / 32768], rtol=1e-6)


def test_resample_keeps_duration_and_shape_of_a_tone():
    t = np.arange(44100) / 44100
    tone = np.sin(2 * np.pi * 100 * t).astype(np.float32)
    out = resample_linear(tone, 44100, 16000)
    assert out.shape == (16000,)
    np.testing.assert_allclose(out, np.sin(2 * np.pi * 100 * np.arange(16000) / 16000), atol=1e-3)
    assert resample_linear(tone, 16000, 16000) is tone


def test_not_a_wav_is_a_clear_error(tmp_path):
    (tmp_path / "x.wav").write_bytes(b"not a wav")
    with pytest.raises(MobiusError, match="cannot read"):
        read_wav(tmp_path / "x.wav")
