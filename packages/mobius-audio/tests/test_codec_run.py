"""``mobius codec`` round-trips audio as transformers' DacModel and EncodecModel do, through the CLI.

A tiny random DAC and EnCodec (codes spread, every parameter perturbed;
``codec_cases/``) are saved with their feature extractors and built once each.
``mobius codec PKG clip.wav`` must write the codes transformers' ``encode`` gives for
the same samples (padded by its extractor) and a WAV of its ``decode``, cut to the
clip, within 1e-4; ``--codebooks 1`` the first stage's codes and their decoding;
EnCodec's ``--bandwidth`` the stages transformers encodes at that bandwidth. The
numpy extractors (:mod:`mobius_audio.codec_features`) must equal transformers'.
``--validate`` (:mod:`mobius_audio.codec_validate`) passes both packages, fails one
whose codebook was changed, and runs a smoke inference without torch.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import soundfile
import torch
import transformers
from codec_cases.dac import DAC
from codec_cases.encodec import ENCODEC

from mobius.cli import main
from mobius.errors import MobiusError
from mobius.testing import (
    PARITY_ATOL,
    assert_smoke_passes,
    assert_validation_fails,
    broken_copy,
    build_with_cli,
)
from mobius.validate import validate_package
from mobius_audio.codec_features import CodecFeatures
from mobius_audio.testing._codec_parity import make_random_codec, random_clips

RATE = 16000
HOP = 6


def build(root, model_type: str, overrides: dict, extractor):
    """``(torch_model, extractor, hf_dir, package_dir)``."""
    model = make_random_codec(transformers.AutoConfig.for_model(model_type, **overrides))
    model.save_pretrained(root / "hf")
    extractor.save_pretrained(root / "hf")
    return model, extractor, root / "hf", build_with_cli(root / "hf", root / "onnx")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The tiny DAC, built once."""
    extractor = transformers.DacFeatureExtractor(hop_length=HOP, sampling_rate=RATE)
    return build(tmp_path_factory.mktemp("dac"), "dac", DAC, extractor)


@pytest.fixture(scope="module")
def built_encodec(tmp_path_factory):
    """The tiny EnCodec at 16 kHz (the clip's rate), 16 samples a frame, built once.

    1 000 frames/s of 4 bits a stage: 8 kbps is 2 stages, 16 kbps all 4.
    """
    extractor = transformers.EncodecFeatureExtractor(sampling_rate=RATE)
    overrides = dict(
        ENCODEC, sampling_rate=RATE, upsampling_ratios=[4, 4], target_bandwidths=[8.0, 16.0]
    )
    return build(tmp_path_factory.mktemp("encodec"), "encodec", overrides, extractor)


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """A 0.3 s mono float WAV (its samples exactly as a reader decodes them)."""
    path = tmp_path_factory.mktemp("clips") / "clip.wav"
    samples = random_clips((int(0.3 * RATE) + 1,), seed=3)[0]  # not a multiple of the hop
    soundfile.write(str(path), samples, RATE, subtype="FLOAT")
    return path, samples


def run_cli(capsys, *args) -> tuple[int, list[str], str]:
    capsys.readouterr()  # what came before (a build's report) is not the command's
    code = main([*map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def transformers_round_trip(model, extractor, samples, codebooks: int):
    """transformers' codes ``[K, frames]`` and decoded audio cut to the clip."""
    inputs = extractor(samples, sampling_rate=RATE, return_tensors="pt")
    with torch.no_grad():
        codes = model.encode(inputs["input_values"]).audio_codes[:, :codebooks]
        audio = model.decode(audio_codes=codes).audio_values
    return codes[0].numpy(), audio[0, : samples.size].numpy()


def encodec_round_trip(model, extractor, samples, bandwidth: float):
    """transformers' EnCodec codes ``[K, frames]`` at ``bandwidth`` and its audio ``[samples]``."""
    inputs = extractor(samples, sampling_rate=RATE, return_tensors="pt")
    with torch.no_grad():
        encoded = model.encode(**inputs, bandwidth=bandwidth)
        audio = model.decode(encoded.audio_codes, encoded.audio_scales, inputs["padding_mask"])
    return encoded.audio_codes[0, 0].numpy(), audio.audio_values[0, 0].numpy()


@pytest.mark.parametrize("bandwidth, stages", [(8.0, 2), (16.0, 4)])
def test_encodec_bandwidth_matches_transformers(
    built_encodec, clip, bandwidth, stages, capsys, tmp_path
):
    """--bandwidth keeps the stages transformers encodes at it."""
    model, extractor, _, package = built_encodec
    path, samples = clip
    out, codes_file = tmp_path / "out.wav", tmp_path / "codes.npy"
    args = ["codec", package, path, "--output", out, "--codes", codes_file]
    code, _, err = run_cli(capsys, *args, "--bandwidth", bandwidth)
    assert code == 0, err
    expected_codes, expected_audio = encodec_round_trip(model, extractor, samples, bandwidth)
    codes = np.load(codes_file)
    assert codes.shape[0] == stages and np.array_equal(codes, expected_codes)
    audio, rate = soundfile.read(str(out), dtype="float32")
    assert rate == RATE and audio.shape == expected_audio.shape
    assert np.abs(audio - expected_audio).max() <= PARITY_ATOL


@pytest.mark.parametrize("codebooks", [None, 1])
def test_codec_round_trip_matches_transformers(built, clip, codebooks, capsys, tmp_path):
    model, extractor, _, package = built
    path, samples = clip
    out, codes_file = tmp_path / "out.wav", tmp_path / "codes.npy"
    args = ["codec", package, path, "--output", out, "--codes", codes_file]
    if codebooks:
        args += ["--codebooks", codebooks]
    code, lines, err = run_cli(capsys, *args)
    assert code == 0, err
    kept = codebooks or DAC["n_codebooks"]
    expected_codes, expected_audio = transformers_round_trip(model, extractor, samples, kept)
    assert lines == [f"{path} -> {out}: {kept} codebooks x {-(-samples.size // HOP)} frames, "
                     f"codes in {codes_file}"]  # fmt: skip
    codes = np.load(codes_file)
    assert codes.dtype == np.int64 and np.array_equal(codes, expected_codes)
    assert len(np.unique(codes)) > 1
    audio, rate = soundfile.read(str(out), dtype="float32")
    assert rate == RATE and audio.shape == expected_audio.shape
    assert np.abs(audio - expected_audio).max() <= PARITY_ATOL


@pytest.mark.parametrize(
    "kind, channels",
    [("DacFeatureExtractor", 1), ("EncodecFeatureExtractor", 1), ("EncodecFeatureExtractor", 2)],
)
def test_numpy_features_equal_transformers(kind, channels):
    """Padding to the longest clip (DAC: rounded up to the hop), on either side; one clip or two."""
    clips = random_clips((1000, 731), seed=5, channels=channels)
    for side in ("right", "left"):
        settings = dict(hop_length=HOP) if kind == "DacFeatureExtractor" else {}
        extractor = getattr(transformers, kind)(
            padding_side=side, feature_size=channels, padding_value=0.25, **settings
        )
        ours = CodecFeatures.from_config(extractor.to_dict())
        for batch in (clips, clips[1:]):
            expected = extractor(batch, sampling_rate=extractor.sampling_rate, return_tensors="np")
            got = ours(batch)
            assert got["input_values"].shape == expected["input_values"].shape
            assert np.abs(got["input_values"] - expected["input_values"]).max() <= 1e-5
            assert np.array_equal(got["padding_mask"], expected["padding_mask"])


def test_numpy_features_refuse_bad_settings():
    good = transformers.DacFeatureExtractor().to_dict()
    for change, message in (
        (dict(feature_extractor_type="WhisperFeatureExtractor"), "not a DacFeatureExtractor"),
        (dict(hop_length=0), "hop_length 0 is not valid"),
        (dict(hop_length="512"), "hop_length '512' is not valid"),
        (dict(padding_side="middle"), "padding_side 'middle' is not valid"),
        (dict(feature_size=2), "DAC takes mono audio"),
        (dict(feature_size=3), "feature_size 3 is not valid"),
        (
            dict(feature_extractor_type="EncodecFeatureExtractor", chunk_length_s=1.0),
            "overlap None is not valid",
        ),
    ):
        with pytest.raises(MobiusError, match=message):
            CodecFeatures.from_config({**good, **change})


def test_refusals(built, built_encodec, clip, capsys, tmp_path):
    """Each is one line on stderr, exit code 1, and names the problem."""
    _, _, hf_dir, package = built
    encodec = built_encodec[3]
    path, _ = clip
    not_audio = tmp_path / "notes.wav"
    not_audio.write_text("not audio")
    refusals = {
        "no such file": ("codec", package, tmp_path / "missing.wav"),
        "cannot decode": ("codec", package, not_audio),
        "no runner of 'mobius codec' accepts": ("codec", hf_dir, path),
        "--codebooks 4: this codec has 1 to 3 codebooks": ("codec", package, path, "--codebooks", 4),
        "--codebooks 0: this codec has 1 to 3 codebooks": ("codec", package, path, "--codebooks", 0),
        "give one audio file": ("codec", package, path, path, "--output", tmp_path / "x.wav"),
        "--bandwidth applies to EnCodec packages": ("codec", package, path, "--bandwidth", 6),
        "--bandwidth 3: this codec encodes at [8.0, 16.0] kbps": (
            "codec", encodec, path, "--bandwidth", 3,
        ),
        # not taken for a speech-to-text package (whose decoder takes token ids)
        "is not a speech-to-text package: it cannot transcribe": ("generate", package, path),
        "give --codebooks or --bandwidth, not both": (
            "codec", encodec, path, "--bandwidth", 8, "--codebooks", 1,
        ),
    }  # fmt: skip
    for message, args in refusals.items():
        code, lines, err = run_cli(capsys, *args)
        assert code == 1 and not lines, (message, err)
        assert len(err.strip().splitlines()) == 1 and message in err, err


@pytest.mark.parametrize("fixture, stages", [("built", 3), ("built_encodec", 4)])
def test_validate(fixture, stages, request, tmp_path, monkeypatch):
    """Both pass; the DAC package with a changed decoder weight fails, and smoke-runs without torch."""
    _, _, hf_dir, package = request.getfixturevalue(fixture)
    report = validate_package(shutil.copytree(package, tmp_path / "copy"), hf_dir)
    assert report.passed and report.tokens_agree is True, report.summary()
    assert set(report.diffs) == {"audio_values[1 codebooks]", f"audio_values[{stages} codebooks]"}
    assert max(report.diffs.values()) <= PARITY_ATOL
    if fixture == "built":
        broken = broken_copy(package, tmp_path / "broken", "decoder/model.onnx", "decoder.")
        assert_validation_fails(broken, hf_dir)
        assert_smoke_passes(package, hf_dir, monkeypatch, tmp_path / "smoke")
