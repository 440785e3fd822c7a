"""``mobius generate PKG "text" --output out.wav`` speaks with a VITS package as transformers does.

One tiny multi-speaker VITS (every parameter perturbed) is built once with the CLI;
``mobius generate`` writes a WAV whose samples equal transformers' waveform on the
same noise (the runner's numpy draws for ``--seed``, fed to PyTorch in place of
``torch.randn``) within 1e-4, with the same length. Bad input gets a one-line error.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import soundfile
from transformers import AutoConfig
from tts_cases.vits import VITS

import mobius_audio
from mobius.cli import main
from mobius.testing import PARITY_ATOL, build_with_cli
from mobius_audio.testing import make_random_vits, speak_with_torch
from mobius_audio.tts import TextToAudio, tokenize

TEXT = "hello there"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(torch_model, package)``: a tiny three-speaker VITS and its built package."""
    root = tmp_path_factory.mktemp("vits")
    config = AutoConfig.for_model("vits", **dict(VITS, num_speakers=3, speaker_embedding_size=6))
    torch_model = make_random_vits(config, root / "hf", seed=1)
    return torch_model, build_with_cli(root / "hf", root / "onnx")


def test_generate_writes_the_wav_transformers_makes(built, tmp_path, capsys, monkeypatch):
    torch_model, package = built
    wav = tmp_path / "out.wav"
    args = ["generate", str(package), TEXT, "--output", str(wav), "--seed", "3", "--speaker", "1"]
    assert main(args) == 0
    assert "wrote" in capsys.readouterr().err
    samples, rate = soundfile.read(wav, dtype="float32")
    assert rate == torch_model.config.sampling_rate

    feeds = tokenize(TextToAudio(package).tokenizer, [TEXT])
    feeds["speaker_id"] = np.array([1], np.int64)
    reference = speak_with_torch(torch_model, feeds, seed=3)
    expected = reference.waveform[0, : int(reference.sequence_lengths[0])].numpy()
    assert samples.shape == expected.shape
    assert np.abs(samples - expected).max() <= PARITY_ATOL

    # The Python API speaks the same; another seed draws other noise: other audio.
    waveform, _ = mobius_audio.synthesize(package, TEXT, seed=3, speaker=1)
    np.testing.assert_array_equal(waveform, samples)
    monkeypatch.chdir(tmp_path)  # without --output: speech.wav here
    assert main(["generate", str(package), TEXT, "--seed", "4", "--speaker", "1"]) == 0
    again, _ = soundfile.read(tmp_path / "speech.wav", dtype="float32")
    assert again.shape != samples.shape or np.abs(again - samples).max() > 1e-3


def _error_of(capsys, args) -> str:
    assert main(args) != 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_bad_speaker_and_text_are_refused(built, tmp_path, capsys):
    _, package = built
    out = str(tmp_path / "x.wav")
    error = _error_of(capsys, ["generate", str(package), TEXT, "--output", out, "--speaker", "7"])
    assert "--speaker 7" in error and "3 speakers" in error
    error = _error_of(capsys, ["generate", str(package), "1234", "--output", out])
    assert "vocabulary" in error


def test_tokenizers_that_need_an_external_tool_are_refused(built, tmp_path, capsys):
    _, package = built
    copy = shutil.copytree(package, tmp_path / "pkg")
    settings = json.loads((copy / "tokenizer_config.json").read_text())
    (copy / "tokenizer_config.json").write_text(json.dumps({**settings, "phonemize": True}))
    assert "phonemize" in _error_of(capsys, ["generate", str(copy), TEXT])

    (copy / "tokenizer_config.json").write_text(json.dumps({**settings, "is_uroman": True}))
    assert "uroman" in _error_of(capsys, ["generate", str(copy), "привет"])

    (copy / "vocab.json").unlink()
    assert "vocab.json" in _error_of(capsys, ["generate", str(copy), TEXT])


def test_unbuilt_variants_are_refused_in_one_line(tmp_path, capsys):
    source = tmp_path / "hf"
    source.mkdir()
    config = AutoConfig.for_model("vits", **dict(VITS, window_size=0))
    config.save_pretrained(source)
    error = _error_of(capsys, ["build", "--model", str(source), str(tmp_path / "out"), "--quiet"])
    assert "window_size must be >= 1" in error

    AutoConfig.for_model("vits", **VITS).save_pretrained(source)
    half = [
        "build",
        "--model",
        str(source),
        str(tmp_path / "o"),
        "-q",
        "--no-weights",
        "--dtype",
        "f16",
    ]
    assert "float32" in _error_of(capsys, half)
