"""Reading audio files for ``mobius generate``: FLAC, OGG, MP3, channels, resampling, refusals.

The files are written here with soundfile (its libsndfile writes MP3 from 1.1 on);
what mobius reads back must be the same signal: exactly for FLAC, and for the lossy
codecs the same tone at the same level.
"""

from __future__ import annotations

import sys
import wave

import numpy as np
import pytest
import soundfile

from mobius.errors import MobiusError
from mobius_audio.audio_file import decode_audio, read_audio, resample, resample_linear

RATE = 16000


def tone(frequency: float, rate: int = RATE, seconds: float = 1.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * frequency * t)).astype(np.float32)


def peak_hz(audio: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(audio * np.hanning(audio.size)))
    return float(np.fft.rfftfreq(audio.size, 1 / rate)[np.argmax(spectrum)])


def rms(audio: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(audio, dtype=np.float64))))


def test_flac_reads_back_exactly_with_channels_averaged(tmp_path):
    left, right = tone(440), tone(660)
    path = tmp_path / "stereo.flac"
    soundfile.write(path, np.stack([left, right], axis=1), RATE, subtype="PCM_16")
    audio, rate = decode_audio(path)
    assert rate == RATE and audio.dtype == np.float32 and audio.shape == left.shape
    np.testing.assert_allclose(audio, (left + right) / 2, atol=1 / 32768)


@pytest.mark.parametrize(
    "name, options",
    [("speech.ogg", dict(format="OGG", subtype="VORBIS")), ("speech.mp3", dict(format="MP3"))],
)
def test_lossy_formats_read_as_the_same_tone(tmp_path, name, options):
    if options["format"] not in soundfile.available_formats():
        pytest.skip(f"this libsndfile ({soundfile.__libsndfile_version__}) cannot write {name}")
    path = tmp_path / name
    soundfile.write(path, tone(440, seconds=2.0), RATE, **options)
    audio = read_audio(path, RATE)
    assert audio.dtype == np.float32
    assert abs(audio.size - 2 * RATE) < 0.1 * RATE  # codec padding at most
    assert abs(peak_hz(audio, RATE) - 440) < 2
    assert abs(rms(audio) - 0.5 / np.sqrt(2)) < 0.03


def test_resampling_filters_what_the_new_rate_cannot_hold(tmp_path):
    # At 48 kHz: 1 kHz passes to 16 kHz; 11 kHz lies above its 8 kHz Nyquist and must go,
    # where linear interpolation folds it back to 5 kHz.
    path = tmp_path / "48k.flac"
    soundfile.write(path, tone(1000, 48000) + tone(11000, 48000), 48000, subtype="PCM_24")
    audio = read_audio(path, RATE)
    assert audio.shape == (RATE,)
    core = slice(800, -800)  # away from the filter's edges
    np.testing.assert_allclose(audio[core], tone(1000)[core], atol=0.02)
    aliased = resample_linear(decode_audio(path)[0], 48000, RATE)
    assert rms(aliased[core] - tone(1000)[core]) > 0.1  # the test can tell the two apart


def test_without_soxr_the_resampler_is_linear(monkeypatch):
    monkeypatch.setitem(sys.modules, "soxr", None)
    signal = tone(1000, 44100)
    np.testing.assert_array_equal(
        resample(signal, 44100, RATE), resample_linear(signal, 44100, RATE)
    )


def test_without_soundfile_a_wav_still_reads_and_flac_is_refused(tmp_path, monkeypatch):
    wav, flac = tmp_path / "a.wav", tmp_path / "a.flac"
    with wave.open(str(wav), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes(np.array([0, 16384, -16384], "<i2").tobytes())
    soundfile.write(flac, tone(440), RATE)
    monkeypatch.setitem(sys.modules, "soundfile", None)
    np.testing.assert_allclose(decode_audio(wav)[0], [0.0, 0.5, -0.5])
    with pytest.raises(MobiusError, match=r"pip install mobius-audio\[run\]"):
        decode_audio(flac)


def test_refusals_name_the_file(tmp_path):
    missing = tmp_path / "missing.flac"
    with pytest.raises(MobiusError, match=f"^no such file: {missing}$"):
        read_audio(missing, RATE)
    with pytest.raises(MobiusError, match="is a directory, not an audio file"):
        read_audio(tmp_path, RATE)
    garbage = tmp_path / "garbage.ogg"
    garbage.write_bytes(b"not audio at all" * 64)
    with pytest.raises(MobiusError, match=r"^cannot decode .*garbage\.ogg as audio \(WAV, FLAC"):
        read_audio(garbage, RATE)
    empty = tmp_path / "empty.wav"
    soundfile.write(empty, np.zeros(0, np.float32), RATE)
    with pytest.raises(MobiusError, match="holds no audio samples"):
        read_audio(empty, RATE)
