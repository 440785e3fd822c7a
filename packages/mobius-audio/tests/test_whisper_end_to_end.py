"""``mobius generate`` transcribes a WAV file as transformers' Whisper ``generate`` does.

The WAV is speech from espeak-ng when it is installed, else a tone with noise
(numpy, written with ``wave``). A tiny random Whisper is saved with the real
WhisperFeatureExtractor and a tiny tokenizer holding Whisper's special tokens, built
with the CLI, and run by ``python -m mobius generate`` (torch hidden, so the
extractor takes its numpy path). Its text, and the generator's token ids, must equal
those of transformers' ``generate`` on the same WAV through the same extractor.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import wave

import numpy as np
import pytest
from _whisper_tiny import SPECIAL, WHISPER, feature_extractor, set_generation_config
from transformers import AutoConfig

from mobius.testing import build_with_cli, make_random_seq2seq, tiny_tokenizer
from mobius_audio.generate import extract_features
from mobius_audio.whisper_generate import WhisperGenerator

MAX_NEW_TOKENS = 12


def write_wav(path, seed: int = 0) -> None:
    """Speech from espeak-ng when it is there, else 0.8 s of a 440 Hz tone with noise at 16 kHz."""
    if shutil.which("espeak-ng"):
        # 220 words a minute keeps "hello world" (0.79 s) inside the tiny model's one-second
        # window; a longer clip would make transformers switch to long-form generation.
        subprocess.run(["espeak-ng", "-s", "220", "-w", str(path), "hello world"], check=True)
        with wave.open(str(path), "rb") as wav:
            assert wav.getnframes() < wav.getframerate(), "the speech outgrew the 1 s window"
        return
    rate = 16000
    t = np.arange(int(0.8 * rate)) / rate
    rng = np.random.default_rng(seed)
    audio = 0.4 * np.sin(2 * np.pi * 440.0 * t) + 0.05 * rng.standard_normal(t.shape)
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())


def reference_audio(path, rate: int) -> np.ndarray:
    """The WAV's samples read independently of mobius (16-bit mono), at ``rate`` as librosa's
    default resampler (soxr, high quality) makes them."""
    import soxr

    with wave.open(str(path), "rb") as wav:
        source_rate, channels = wav.getframerate(), wav.getnchannels()
        assert wav.getsampwidth() == 2
        samples = np.frombuffer(wav.readframes(wav.getnframes()), "<i2")
    audio = (samples.astype(np.float64) / 32768).reshape(-1, channels).mean(axis=1)
    if source_rate == rate:
        return audio.astype(np.float32)
    return soxr.resample(audio.astype(np.float32), source_rate, rate, quality="HQ")


# Ids past <|notimestamps|> (59) are timestamps to transformers' generate, which splits
# its output into segments at them and decodes again from the last one (27 tokens for
# max_new_tokens=12 on the speech clip). Real Whisper models do not emit them without
# timestamps; a random one does, so both sides suppress them.
TIMESTAMPS = list(range(60, WHISPER["vocab_size"]))


@pytest.mark.parametrize(
    "generation",
    [
        dict(suppress_tokens=[1, 23, *TIMESTAMPS], begin_suppress_tokens=[50]),  # English
        dict(  # the language detected, the task forced
            language=None,
            task=None,
            forced_decoder_ids=[[1, None], [2, 55]],
            suppress_tokens=TIMESTAMPS,
        ),
    ],
    ids=["english", "detected-language"],
)
def test_generate_transcribes_a_wav(tmp_path, generation):
    import torch

    extractor = feature_extractor()
    hf_config = AutoConfig.for_model("whisper", **WHISPER)
    model = make_random_seq2seq(hf_config, seed=1, auto_class="AutoModelForSpeechSeq2Seq")
    set_generation_config(model, **generation)
    model.save_pretrained(tmp_path / "hf")
    extractor.save_pretrained(tmp_path / "hf")
    tokenizer = tiny_tokenizer(WHISPER["vocab_size"], SPECIAL)
    tokenizer.save_pretrained(tmp_path / "hf")
    wav_path = tmp_path / "speech.wav"
    write_wav(wav_path)

    audio = reference_audio(wav_path, extractor.sampling_rate)
    features = extract_features(extractor, audio, extractor.sampling_rate)
    with torch.no_grad():
        expected = model.generate(
            input_features=torch.from_numpy(features), do_sample=False,
            max_new_tokens=MAX_NEW_TOKENS,
        )[0].tolist()  # fmt: skip
    eos = WHISPER["eos_token_id"]
    expected = expected[: expected.index(eos)] if eos in expected else expected
    assert len(set(expected)) > 1, "a degenerate reference: the test would prove little"

    out = build_with_cli(tmp_path / "hf", tmp_path / "onnx")
    generator = WhisperGenerator(out)
    tokens = list(
        generator.transcribe_ids(audio, extractor.sampling_rate, max_new_tokens=MAX_NEW_TOKENS)
    )
    assert tokens == expected

    run = subprocess.run(
        [sys.executable, "-m", "mobius", "generate", str(out), str(wav_path),
         "--max-new-tokens", str(MAX_NEW_TOKENS)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.rstrip("\n") == tokenizer.decode(expected, skip_special_tokens=True)
