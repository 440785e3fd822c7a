"""``mobius codec`` on Mimi, through the CLI, against transformers' MimiModel.

A tiny random Mimi (``codec_cases/mimi.py``: codes spread, every parameter
perturbed) is saved with its ``EncodecFeatureExtractor`` and built once. ``mobius
codec PKG clip.wav`` must write the codes of transformers' ``encode`` on the same
samples and a WAV of its ``decode`` cut to the clip (within 1e-4), with every
codebook, with the semantic one alone and with the semantic plus one acoustic
(``--codebooks``: the leading stages equal ``encode(num_quantizers=K)``).
``--validate`` passes; configs transformers cannot run are refused in one line.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import soundfile
import torch
import transformers
from codec_cases.mimi import MIMI

from mobius.cli import main
from mobius.testing import PARITY_ATOL, build_with_cli
from mobius.validate import validate_package
from mobius_audio.codec_features import CodecFeatures
from mobius_audio.testing._codec_parity import make_random_codec, random_clips

RATE = MIMI["sampling_rate"]
HOP = 12  # strides 3 x 2, then the latent stride 2


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(torch_model, extractor, hf_dir, package_dir)`` of the tiny Mimi, built once."""
    root = tmp_path_factory.mktemp("mimi")
    model = make_random_codec(transformers.AutoConfig.for_model("mimi", **MIMI))
    extractor = transformers.EncodecFeatureExtractor(sampling_rate=RATE)
    model.save_pretrained(root / "hf")
    extractor.save_pretrained(root / "hf")
    return model, extractor, root / "hf", build_with_cli(root / "hf", root / "onnx")


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """A 0.2 s mono float WAV, not a whole number of frames."""
    path = tmp_path_factory.mktemp("clips") / "clip.wav"
    samples = random_clips((int(0.2 * RATE) + 5,), seed=3)[0]
    soundfile.write(str(path), samples, RATE, subtype="FLOAT")
    return path, samples


def run_cli(capsys, *args) -> tuple[int, list[str], str]:
    capsys.readouterr()
    code = main([*map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


@pytest.mark.parametrize("codebooks", [None, 1, 2])
def test_mimi_round_trip_matches_transformers(built, clip, codebooks, capsys, tmp_path):
    model, extractor, _, package = built
    path, samples = clip
    out, codes_file = tmp_path / "out.wav", tmp_path / "codes.npy"
    args = ["codec", package, path, "--output", out, "--codes", codes_file]
    if codebooks:
        args += ["--codebooks", codebooks]
    code, lines, err = run_cli(capsys, *args)
    assert code == 0, err
    kept = codebooks or MIMI["num_quantizers"]
    inputs = extractor(samples, sampling_rate=RATE, return_tensors="pt")
    with torch.no_grad():
        expected_codes = model.encode(inputs["input_values"], num_quantizers=kept).audio_codes
        expected_audio = model.decode(expected_codes).audio_values[0, :, : samples.size]
    frames = -(-samples.size // HOP)
    assert lines == [f"{path} -> {out}: {kept} codebooks x {frames} frames, codes in {codes_file}"]
    codes = np.load(codes_file)
    assert np.array_equal(codes, expected_codes[0].numpy()) and len(np.unique(codes)) > 1
    audio, rate = soundfile.read(str(out), dtype="float32")
    assert rate == RATE and audio.shape == (samples.size,)
    assert np.abs(audio - expected_audio[0].numpy()).max() <= PARITY_ATOL


def test_numpy_features_equal_mimis_extractor():
    """kyutai/mimi's extractor settings (24 kHz mono, right padding) in numpy."""
    extractor = transformers.EncodecFeatureExtractor(sampling_rate=24000, feature_size=1)
    clips = random_clips((2400, 1901), seed=4)
    expected = extractor(clips, sampling_rate=24000, return_tensors="np")
    got = CodecFeatures.from_config(extractor.to_dict())(clips)
    assert np.abs(got["input_values"] - expected["input_values"]).max() <= 1e-5
    assert np.array_equal(got["padding_mask"], expected["padding_mask"])


def test_mimi_validate(built, tmp_path):
    _, _, hf_dir, package = built
    report = validate_package(shutil.copytree(package, tmp_path / "copy"), hf_dir)
    assert report.passed and report.tokens_agree is True, report.summary()
    assert max(report.diffs.values()) <= PARITY_ATOL


def test_mimi_refusals(built, clip, tmp_path, capsys):
    """One line each, naming the setting or the problem."""
    _, _, _, package = built
    path, _ = clip
    for message, change in {
        "must be below the convs' frame rate": dict(frame_rate=1000),
        "codebook_dim 16 must equal vector_quantization_hidden_dimension 8": dict(codebook_dim=16),
        "upsample_groups 5 does not divide hidden_size 16": dict(upsample_groups=5),
        "trim_right_ratio 0.5: only causal convs": dict(
            trim_right_ratio=0.5, use_causal_conv=False
        ),
    }.items():
        source = tmp_path / f"hf-{len(message)}"
        transformers.AutoConfig.for_model("mimi", **{**MIMI, **change}).save_pretrained(source)
        code, _, err = run_cli(capsys, "build", "--model", source, tmp_path / "out", "-q")
        assert code == 1 and len(err.strip().splitlines()) == 1 and message in err, err
    for message, args in {
        "--codebooks 5: this codec has 1 to 4 codebooks": ("--codebooks", 5),
        "--bandwidth applies to EnCodec packages": ("--bandwidth", 6),
    }.items():
        code, lines, err = run_cli(capsys, "codec", package, path, *args)
        assert code == 1 and not lines and len(err.strip().splitlines()) == 1, err
        assert message in err, err


def test_a_half_precision_build_is_refused(built, tmp_path, capsys):
    """Codes are nearest codebook rows: the codec graphs are float32 only, said in one line."""
    assert main(["build", "--model", str(built[2]), str(tmp_path / "f16"), "--dtype", "f16"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "float32" in err[0], err
    assert not (tmp_path / "f16").exists()
