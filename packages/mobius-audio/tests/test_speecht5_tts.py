"""SpeechT5 text-to-speech and its HiFi-GAN vocoder, built with the CLI, against transformers.

A tiny random SpeechT5ForTextToSpeech (every parameter perturbed, a character
sentencepiece tokenizer) and a tiny SpeechT5HifiGan (its ``config.json`` saying
``"model_type": "hifigan"`` as the hub's does) are built once with ``mobius
build``, the vocoder into the speech package's ``vocoder/`` folder. transformers'
``generate_speech`` runs on the dropout masks the runner draws for the seed
(:mod:`mobius_audio.testing._speecht5_tts_parity`): a batch of two texts of
different lengths (their stop probabilities reach the threshold at different
steps) must give the same spectrograms, lengths and waveforms
within 1e-4, and ``mobius generate`` the same WAV (there ``maxlenratio`` stops it).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import soundfile
from test_speecht5_generate import WITHOUT_TORCH, char_sentencepiece
from test_speecht5_parity import SPEECHT5
from transformers import AutoConfig, SpeechT5HifiGanConfig, SpeechT5Tokenizer

from mobius.cli import main
from mobius.errors import ConfigError
from mobius.testing import PARITY_ATOL, build_with_cli
from mobius_audio.models.speecht5_hifigan import SpeechT5HifiGanConfig as HifiGanConfig
from mobius_audio.models.speecht5_tts import SpeechT5TtsConfig
from mobius_audio.speecht5_tts import SpeechT5Speaker, StopRule
from mobius_audio.testing._speecht5_tts_parity import (
    make_random_hifigan,
    make_random_speecht5_tts,
    speak_with_torch,
)

TTS = dict(
    SPEECHT5,  # the recogniser's encoder and decoder sizes (its conv fields go unread)
    vocab_size=28,  # the character sentencepiece model's ids
    encoder_max_relative_position=4,  # under the texts' lengths: the clamp is reached
    num_mel_bins=8,
    reduction_factor=2,
    speech_decoder_prenet_layers=2,
    speech_decoder_prenet_units=16,
    speaker_embedding_dim=12,
    speech_decoder_postnet_layers=3,
    speech_decoder_postnet_units=16,
    speech_decoder_postnet_kernel=3,
    max_speech_positions=60,
    initializer_range=0.2,  # stop probabilities that differ between rows and steps
)
HIFIGAN = dict(
    model_in_dim=8,
    upsample_initial_channel=16,
    upsample_rates=[2, 3],
    upsample_kernel_sizes=[4, 5],
    resblock_kernel_sizes=[3, 5],
    resblock_dilation_sizes=[[1, 2], [1, 3]],
)
TEXTS = ["the quick brown fox", "lazy dog"]
SEED = 7
STOP = StopRule(threshold=0.54, maxlenratio=2.0)  # the rows stop at steps 9 and 1
CLI_STOP = StopRule(threshold=0.54, maxlenratio=0.5)  # 5 steps: maxlenratio stops it


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(torch model, torch vocoder, package)``, the vocoder built into ``package/vocoder``;
    ``package.parent / "onnx-cpu"`` is the same built with ``--ep cpu`` (ORT's fused ops)."""
    root = tmp_path_factory.mktemp("speecht5_tts")
    hf_config = AutoConfig.for_model("speecht5", architectures=["SpeechT5ForTextToSpeech"], **TTS)
    model = make_random_speecht5_tts(hf_config, root / "hf", seed=1)
    SpeechT5Tokenizer(char_sentencepiece(root)).save_pretrained(root / "hf")
    vocoder = make_random_hifigan(SpeechT5HifiGanConfig(**HIFIGAN), root / "hifigan", seed=2)
    package = build_with_cli(root / "hf", root / "onnx", "--validate")
    build_with_cli(root / "hifigan", package / "vocoder", "--validate")
    build_with_cli(root / "hf", root / "onnx-cpu", "--ep", "cpu")
    return model, vocoder, package


def speakers(batch: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(
        (batch, TTS["speaker_embedding_dim"]), np.float32
    )


def test_builds_pick_their_tasks_and_validate(built):
    package = built[2]
    for folder, task, reference in (
        (package, "text-to-speech", "SpeechT5ForTextToSpeech"),
        (package / "vocoder", "spectrogram-vocoder", "SpeechT5HifiGan"),
    ):
        record = json.loads((folder / "mobius.json").read_text())
        assert record["task"] == task
        report = record["validation"]
        assert report["passed"] and report["reference"] == f"transformers {reference}", report
        assert max(report["diffs"].values()) <= PARITY_ATOL, report["diffs"]


def test_encoder_and_vocoder_graphs_equal_pytorch(built):
    import torch

    model, vocoder, package = built
    speaker = SpeechT5Speaker(package)
    feeds = speaker.tokenize(TEXTS)
    (hidden, *_) = speaker.sessions["encoder"].run(None, feeds)
    with torch.no_grad():
        expected = model.speecht5.encoder(
            torch.from_numpy(feeds["input_ids"]), torch.from_numpy(feeds["attention_mask"])
        ).last_hidden_state.numpy()
    real = feeds["attention_mask"].astype(bool)
    assert np.abs(hidden - expected)[real].max() <= PARITY_ATOL

    spectrogram = np.random.default_rng(1).standard_normal((2, 9, 8), np.float32)
    session, rate = speaker.vocoder()
    (waveform,) = session.run(None, {"spectrogram": spectrogram})
    with torch.no_grad():
        expected = vocoder(torch.from_numpy(spectrogram)).numpy()
    assert waveform.shape == expected.shape == (2, 9 * 6) and rate == 16000
    assert np.abs(waveform - expected).max() <= PARITY_ATOL


@pytest.mark.parametrize("ep", ["default", "cpu"])
def test_batch_speaks_as_transformers(built, ep):
    model, vocoder, package = built
    vocoder_dir = package / "vocoder"
    if ep == "cpu":
        package = package.parent / "onnx-cpu"
    speaker = SpeechT5Speaker(package, vocoder_dir)
    feeds = speaker.tokenize(TEXTS)
    assert feeds["attention_mask"][1].sum() < feeds["attention_mask"][0].sum()
    embeddings = speakers(2)
    rng = np.random.default_rng(SEED)
    spectrograms = speaker.spectrograms(feeds, embeddings, rng, STOP)
    expected, lengths = speak_with_torch(model, feeds, embeddings, SEED, STOP)
    assert [len(s) for s in spectrograms] == lengths
    assert len(set(lengths)) == 2, "both rows stop alike: the test would prove little"
    for row, spectrogram in enumerate(spectrograms):
        assert np.abs(spectrogram - expected[row, : len(spectrogram)]).max() <= PARITY_ATOL

    waveforms, _ = speaker.waveforms(spectrograms)
    expected, lengths = speak_with_torch(model, feeds, embeddings, SEED, STOP, vocoder=vocoder)
    assert [len(w) for w in waveforms] == lengths
    for row, waveform in enumerate(waveforms):
        assert np.abs(waveform - expected[row, : len(waveform)]).max() <= PARITY_ATOL


def test_generate_writes_the_wav_transformers_makes(built, tmp_path, capsys):
    model, vocoder, package = built
    voice = tmp_path / "voice.npy"
    np.save(voice, speakers(1)[0])
    wav = tmp_path / "out.wav"
    args = ["generate", str(package), TEXTS[0], "--speaker-embedding", str(voice),
            "--seed", str(SEED), "--stop-threshold", str(CLI_STOP.threshold),
            "--max-length-ratio", str(CLI_STOP.maxlenratio)]  # fmt: skip
    assert main([*args, "--output", str(wav)]) == 0
    assert "wrote" in capsys.readouterr().err
    samples, rate = soundfile.read(wav, dtype="float32")
    assert rate == 16000

    feeds = SpeechT5Speaker(package).tokenize(TEXTS[:1])
    expected, lengths = speak_with_torch(model, feeds, speakers(1), SEED, CLI_STOP, vocoder=vocoder)
    assert samples.shape == (lengths[0],) == (5 * 2 * 6,)  # steps * reduction_factor * upsampling
    assert np.abs(samples - expected[0, : lengths[0]]).max() <= PARITY_ATOL

    # --vocoder names the vocoder's package; another seed drops other units: other audio.
    again = tmp_path / "again.wav"
    vocoder_dir = package / "vocoder"
    assert (
        main([*args[:-4], "--seed", "8", "--vocoder", str(vocoder_dir), "--output", str(again)])
        == 0
    )
    other, _ = soundfile.read(again, dtype="float32")
    assert other.shape != samples.shape or np.abs(other - samples).max() > 1e-3


def test_generate_runs_without_torch(built, tmp_path):
    """The runner needs no torch: ``python -m mobius generate`` where torch cannot be imported."""
    package = built[2]
    voice, wav = tmp_path / "voice.npy", tmp_path / "out.wav"
    np.save(voice, speakers(1)[0])
    run = subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH, "generate", str(package), TEXTS[1],
         "--speaker-embedding", str(voice), "--seed", "1", "--output", str(wav)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    samples, rate = soundfile.read(wav, dtype="float32")
    assert rate == 16000 and len(samples) > 0 and np.isfinite(samples).all()


def _error_of(capsys, args) -> str:
    capsys.readouterr()
    assert main(args) != 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_bad_input_is_refused(built, tmp_path, capsys):
    package = str(built[2])
    run = ["generate", package, "hello"]
    assert "pass --speaker-embedding" in _error_of(capsys, run)
    missing = tmp_path / "missing.npy"
    assert _error_of(capsys, [*run, "--speaker-embedding", str(missing)]).endswith(
        f"no such file: {missing}"
    )
    wrong = tmp_path / "wrong.npy"
    np.save(wrong, np.ones(5, np.float32))
    assert "must have shape [12], not [5]" in _error_of(
        capsys, [*run, "--speaker-embedding", str(wrong)]
    )
    pickled = tmp_path / "pickled.npy"
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    error = _error_of(capsys, [*run, "--speaker-embedding", str(pickled)])
    assert f"cannot read {pickled} as a numpy .npy array" in error
    voice = tmp_path / "voice.npy"
    np.save(voice, speakers(1)[0])
    nowhere = tmp_path / "no-vocoder"
    error = _error_of(capsys, [*run, "--speaker-embedding", str(voice), "--vocoder", str(nowhere)])
    assert f"no vocoder in {nowhere}" in error
    encoder = f"{package}/encoder"  # a model.onnx, but one that reads token ids
    error = _error_of(capsys, [*run, "--speaker-embedding", str(voice), "--vocoder", encoder])
    assert "is not a spectrogram-vocoder package" in error


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(speech_decoder_prenet_dropout=1.0), "not in \\[0, 1\\)"),
        (dict(speech_decoder_postnet_kernel=4), "even speech_decoder_postnet_kernel"),
        (dict(reduction_factor=0), "reduction_factor must be a positive integer"),
        (dict(architectures=["SpeechT5ForSpeechToText"]), "not built as SpeechT5ForTextToSpeech"),
    ],
)
def test_text_to_speech_config_refusals(change, message):
    hf_config = AutoConfig.for_model("speecht5", architectures=["SpeechT5ForTextToSpeech"], **TTS)
    for key, value in change.items():
        setattr(hf_config, key, value)
    with pytest.raises(ConfigError, match=message):
        SpeechT5TtsConfig.from_hf(hf_config)


def test_vocoder_config_refusals():
    with pytest.raises(ConfigError, match="differ in length"):
        HifiGanConfig.from_hf(SpeechT5HifiGanConfig(**dict(HIFIGAN, upsample_rates=[2])))
    with pytest.raises(ConfigError, match="pair with the kernels"):
        HifiGanConfig.from_hf(SpeechT5HifiGanConfig(**dict(HIFIGAN, resblock_dilation_sizes=[[1]])))
