"""The vectorised Whisper log-mel equals transformers' numpy path (``WhisperFeatureExtractor``).

Short clips are zero-padded to the window, a full window is taken as it is, long-form
audio (``truncation=False, padding="longest"``, as ``WhisperGenerator.log_mel`` asks
beyond one window) is kept whole and crosses a block boundary of the frame loop; 80
and 128 mel bins, a one-second window. An extractor with dither stays on
transformers' path.
"""

from __future__ import annotations

import numpy as np
import pytest
from transformers import WhisperFeatureExtractor

from mobius_audio import whisper_features
from mobius_audio.generate import extract_inputs

RATE = 16000


def _clip(seconds: float, seed: int) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    rng = np.random.default_rng(seed)
    tone = 0.3 * np.sin(2 * np.pi * (200 + 90 * seed) * t) * np.sin(2 * np.pi * 1.3 * t)
    return (tone + 0.05 * rng.standard_normal(t.shape)).astype(np.float32)


@pytest.mark.parametrize(
    ("mels", "chunk", "seconds", "options"),
    [
        (80, 30, 7.3, {}),  # padded to 30 s
        (128, 30, 30.0, {}),  # exactly one window
        (80, 30, 41.5, dict(truncation=False, padding="longest")),  # long-form, 2 blocks
        (80, 1, 0.8, {}),  # the tests' one-second window
        (80, 1, 1.7, {}),  # cut to the window
    ],
    ids=["padded", "full-128-mels", "long-form", "one-second", "truncated"],
)
def test_equals_transformers(mels, chunk, seconds, options, monkeypatch):
    extractor = WhisperFeatureExtractor(feature_size=mels, chunk_length=chunk)
    assert whisper_features.supports(extractor)
    monkeypatch.setattr(whisper_features, "BLOCK_FRAMES", 2048)  # long-form crosses blocks
    audio = _clip(seconds, seed=mels)
    expected = extract_inputs(extractor, audio, RATE, **options)["input_features"]
    got = whisper_features.whisper_log_mel(extractor, audio, **options)
    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)


def test_dither_stays_on_transformers_path():
    assert not whisper_features.supports(WhisperFeatureExtractor(dither=1e-5))
