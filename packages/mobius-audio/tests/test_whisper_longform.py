"""Whisper long-form transcription, timestamps, language and task, against transformers.

The recording is ``data/longform.ogg``: 66.6 s of espeak-ng speech at 16 kHz
(``data/make_longform.sh`` made it; CI has no espeak-ng), read here with soundfile
alone and by mobius through its own decoder. A tiny random Whisper over the released
checkpoints' 30 s window (``WHISPER_30S``: every parameter perturbed, all 1501
timestamp tokens, the released multilingual generation config: language detected,
``forced_decoder_ids`` for transcription, the first timestamp at most 1.00 s into a
window) is saved with the real default WhisperFeatureExtractor and a tiny tokenizer
and built once with the CLI. transformers' ``generate`` runs on the extractor's
numpy features, as a transformers user makes them (``truncation=False,
padding="longest"`` beyond 30 s); its segments, tokens and window starts (through
``monitor_progress``) are what ``mobius generate`` and the Python API must give.

The random model emits timestamp tokens on its own: the long-form test asserts that
transformers decoded at least two windows and moved on at least once at a timestamp
pair (less than a whole window), so a seed or model change that lost either fails.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import numpy as np
import pytest
import soundfile
from _whisper_tiny import SPECIAL, WHISPER_30S, set_generation_config
from transformers import AutoConfig, WhisperFeatureExtractor

import mobius_audio
from mobius.cli import main
from mobius.errors import MobiusError
from mobius.testing import build_with_cli, make_random_seq2seq, tiny_tokenizer
from mobius_audio.generate import open_speech_generator
from mobius_audio.whisper_generate import WhisperGenerator

RECORDING = Path(__file__).parent / "data" / "longform.ogg"
RATE = 16000
MAX_NEW_TOKENS = 16
TIMESTAMP_BEGIN = SPECIAL["<|notimestamps|>"] + 1
WINDOW = 3000  # feature frames in 30 s


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    root = tmp_path_factory.mktemp("whisper-30s")
    hf_config = AutoConfig.for_model("whisper", **WHISPER_30S)
    model = make_random_seq2seq(hf_config, seed=1, auto_class="AutoModelForSpeechSeq2Seq")
    set_generation_config(
        model,
        language=None,
        task=None,
        forced_decoder_ids=[[1, None], [2, SPECIAL["<|transcribe|>"]]],
        max_initial_timestamp_index=50,
    )
    model.save_pretrained(root / "hf")
    extractor = WhisperFeatureExtractor(feature_size=80)  # the released 30 s window
    extractor.save_pretrained(root / "hf")
    tokenizer = tiny_tokenizer(WHISPER_30S["vocab_size"], SPECIAL)
    tokenizer.save_pretrained(root / "hf")
    package = build_with_cli(root / "hf", root / "onnx")
    return SimpleNamespace(model=model, extractor=extractor, tokenizer=tokenizer, package=package)


@pytest.fixture(scope="module")
def recording() -> np.ndarray:
    audio, rate = soundfile.read(RECORDING, dtype="float32")
    assert rate == RATE and audio.ndim == 1 and audio.size >= 60 * RATE
    return audio


def hf_inputs(extractor, audio: np.ndarray) -> dict:
    """The extractor's features and mask as a transformers user asks for them (numpy path)."""
    import torch

    longer = dict(truncation=False, padding="longest") if audio.size > extractor.n_samples else {}
    module = sys.modules[type(extractor).__module__]
    with mock.patch.object(module, "is_torch_available", lambda: False):
        inputs = extractor(
            audio, sampling_rate=RATE, return_attention_mask=True, return_tensors="np", **longer
        )
    return {name: torch.from_numpy(value) for name, value in inputs.items()}


def reference(whisper, audio: np.ndarray, **options):
    """transformers' ``generate``: ``(segments as (start, end, tokens), window starts)``."""
    import torch

    inputs = hf_inputs(whisper.extractor, audio)
    seeks = []
    with torch.no_grad():
        out = whisper.model.generate(
            input_features=inputs["input_features"],
            attention_mask=inputs["attention_mask"],
            return_segments=True,
            max_new_tokens=MAX_NEW_TOKENS,
            monitor_progress=lambda progress: seeks.append(int(progress[0, 0])),
            **options,
        )
    segments = [
        (float(s["start"]), float(s["end"]), s["tokens"].tolist()) for s in out["segments"][0]
    ]
    return segments, seeks


def text_of(tokenizer, tokens) -> str:
    return tokenizer.decode([t for t in tokens if t < TIMESTAMP_BEGIN], skip_special_tokens=True)


def lines_of(tokenizer, segments) -> list[str]:
    """``mobius generate --timestamps``'s lines for transformers' segments."""
    return [f"[{s:.2f} -> {e:.2f}] {text_of(tokenizer, t).strip()}" for s, e, t in segments]


def generate(capsys, *args) -> tuple[str, str]:
    code = main(["generate", *map(str, args), "--max-new-tokens", str(MAX_NEW_TOKENS)])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out.rstrip("\n"), err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_long_form_matches_transformers(whisper, recording, capsys, monkeypatch):
    expected, seeks = reference(whisper, recording, return_timestamps=True)
    advances = np.diff(seeks).tolist()
    assert len(seeks) >= 2 and any(0 < step < WINDOW for step in advances), (
        f"transformers' windows started at frames {seeks}: the test needs two windows and a "
        "move to a timestamp pair"
    )
    assert any(t >= TIMESTAMP_BEGIN for _, _, tokens in expected for t in tokens)

    generator = WhisperGenerator(whisper.package)
    generator.progress = True
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    segments = list(generator.transcribe_segments(recording, RATE, max_new_tokens=MAX_NEW_TOKENS))
    monkeypatch.undo()
    assert [(s.start, s.end, s.tokens) for s in segments] == expected  # times to the last bit
    assert generator.stats.seeks == seeks
    assert "transcribing" in terminal.getvalue()  # the bar, on a terminal

    # The CLI decodes the file itself; quiet on a stderr that is not a terminal.
    out, err = generate(capsys, whisper.package, RECORDING, "--timestamps")
    assert out.splitlines() == lines_of(whisper.tokenizer, expected)
    assert "transcribing" not in err and "3 windows" in err
    out, _ = generate(capsys, whisper.package, RECORDING)
    assert out == text_of(whisper.tokenizer, [t for _, _, tokens in expected for t in tokens])


def test_timestamps_of_a_short_clip(whisper, recording):
    clip = recording[: 8 * RATE]
    expected, _ = reference(whisper, clip, return_timestamps=True)
    segments = mobius_audio.transcribe(
        whisper.package, clip, sampling_rate=RATE, timestamps=True, max_new_tokens=MAX_NEW_TOKENS
    )
    assert [(s.start, s.end, s.tokens) for s in segments] == expected
    assert [s.line() for s in segments] == lines_of(whisper.tokenizer, expected)


@pytest.mark.parametrize(
    "flags, options, prompt",
    [
        ((), {}, ["detected", SPECIAL["<|transcribe|>"]]),
        # the language transformers does not detect, by name; the task defaults to transcribe
        (("--language", "english"), dict(language="english"), [52, SPECIAL["<|transcribe|>"]]),
        (("--task", "translate"), dict(task="translate"), ["detected", SPECIAL["<|translate|>"]]),
    ],
    ids=["detected", "language", "translate"],
)
def test_language_and_task(whisper, recording, tmp_path, capsys, flags, options, prompt):
    import torch

    clip = recording[: 8 * RATE]
    path = tmp_path / "clip.wav"
    soundfile.write(path, clip, RATE, subtype="FLOAT")  # float WAV: the same samples back
    with torch.no_grad():
        features = hf_inputs(whisper.extractor, clip)["input_features"]
        detected = int(whisper.model.detect_language(features)[0])
    assert detected == SPECIAL["<|de|>"], "the forced case must force the other language"
    expected, _ = reference(whisper, clip, return_timestamps=False, **options)
    tokens = [t for _, _, segment in expected for t in segment]

    out, err = generate(capsys, whisper.package, path, *flags)
    assert out == text_of(whisper.tokenizer, tokens)
    generator = WhisperGenerator(whisper.package)
    assert list(generator.transcribe_ids(clip, RATE, max_new_tokens=MAX_NEW_TOKENS, **options)) == (
        tokens
    )
    start, no_timestamps = SPECIAL["<|startoftranscript|>"], SPECIAL["<|notimestamps|>"]
    language = detected if prompt[0] == "detected" else prompt[0]
    assert generator.stats.prompt == [start, language, prompt[1], no_timestamps]
    assert ("(detected)" in err) == (prompt[0] == "detected")


def test_refusals(whisper, recording, tmp_path, capsys):
    garbage = tmp_path / "noise.mp3"
    garbage.write_bytes(b"\x00 this is not audio " * 50)
    for args, message in (
        ((tmp_path / "missing.wav",), f"no such file: {tmp_path / 'missing.wav'}"),
        ((garbage,), f"cannot decode {garbage} as audio (WAV, FLAC, OGG, MP3): "),
        ((RECORDING, "--language", "klingon"), "language 'klingon' is not one"),
        ((RECORDING, "--system", "hi"), "a speech-to-text package takes no system message"),
    ):
        assert main(["generate", str(whisper.package), *map(str, args)]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"mobius: error: {message}") and err.count("\n") == 1, err
    generator = WhisperGenerator(whisper.package)
    generator.generation_config["is_multilingual"] = False
    with pytest.raises(MobiusError, match="English-only Whisper"):
        list(generator.transcribe_ids(recording[:RATE], RATE, task="translate"))


def test_a_whisper_package_opens_the_whisper_generator(whisper):
    assert type(open_speech_generator(whisper.package)) is WhisperGenerator
