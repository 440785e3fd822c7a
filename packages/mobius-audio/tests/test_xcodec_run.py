"""``mobius codec`` on an X-Codec package round-trips audio as transformers' XcodecModel does.

The tiny random X-Codec of ``codec_cases/xcodec.py`` (HuBERT semantic model, codes
spread, every parameter perturbed) is saved with its DacFeatureExtractor and built
once. Through the CLI: every codebook, ``--codebooks 1`` and ``--bandwidth`` (the
stages transformers' ``encode`` keeps at that bandwidth) must give transformers'
codes exactly and its decoded audio, cut to the clip, within 1e-4. ``--validate``
passes; configs that are not built are refused in one line naming the setting.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import soundfile
import torch
import transformers
from codec_cases.xcodec import EXTRACTOR, SEMANTIC, XCODEC

from mobius.cli import main
from mobius.testing import PARITY_ATOL, build_with_cli
from mobius.validate import validate_package
from mobius_audio.codec_features import CodecFeatures
from mobius_audio.testing._codec_parity import build_random_codec, random_clips

RATE = EXTRACTOR["sampling_rate"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(torch_model, extractor, hf_dir, package_dir)`` of the tiny X-Codec, built once."""
    config = transformers.AutoConfig.for_model("xcodec", **XCODEC)
    extractor = transformers.DacFeatureExtractor(**EXTRACTOR)
    model, hf_dir, package = build_random_codec(
        tmp_path_factory.mktemp("xcodec"), config, extractor
    )
    return model, extractor, hf_dir, package


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """A 0.4 s mono float WAV, not a multiple of the hop (6 samples)."""
    path = tmp_path_factory.mktemp("clips") / "clip.wav"
    samples = random_clips((int(0.4 * RATE) + 1,), seed=7)[0]
    soundfile.write(str(path), samples, RATE, subtype="FLOAT")
    return path, samples


def transformers_round_trip(model, extractor, samples, bandwidth, stages):
    """transformers' first ``stages`` codes ``[K, frames]`` at ``bandwidth`` (None: the largest),
    and their decoded audio cut to the clip."""
    inputs = extractor(samples, sampling_rate=RATE, return_tensors="pt")
    with torch.no_grad():
        codes = model.encode(inputs["input_values"], bandwidth=bandwidth).audio_codes
        codes = codes[:, :stages]
        audio = model.decode(codes).audio_values
    return codes[0].numpy(), audio[0, 0, : samples.size].numpy()


@pytest.mark.parametrize(
    "args, bandwidth, stages",
    [((), None, 3), (("--bandwidth", 4.0), 4.0, 1), (("--codebooks", 1), None, 1)],
)
def test_round_trip_matches_transformers(built, clip, args, bandwidth, stages, capsys, tmp_path):
    model, extractor, _, package = built
    path, samples = clip
    out, codes_file = tmp_path / "out.wav", tmp_path / "codes.npy"
    capsys.readouterr()
    code = main(["codec", str(package), str(path), "--output", str(out), "--codes", str(codes_file),
                 *map(str, args)])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    expected_codes, expected_audio = transformers_round_trip(
        model, extractor, samples, bandwidth, stages
    )
    frames = expected_codes.shape[1]
    assert captured.out.splitlines() == [
        f"{path} -> {out}: {stages} codebooks x {frames} frames, codes in {codes_file}"
    ]
    codes = np.load(codes_file)
    assert codes.shape == (stages, frames) and np.array_equal(codes, expected_codes)
    assert len(np.unique(codes[0])) > 1
    audio, rate = soundfile.read(str(out), dtype="float32")
    assert rate == RATE and audio.shape == expected_audio.shape
    assert np.abs(audio - expected_audio).max() <= PARITY_ATOL


def test_numpy_features_equal_transformers():
    """X-Codec's extractor is DAC's: the hub's settings (hop 320 at 16 kHz), two clips."""
    extractor = transformers.DacFeatureExtractor(hop_length=320, sampling_rate=16000)
    clips = random_clips((3001, 2500), seed=2)
    expected = extractor(clips, sampling_rate=16000, return_tensors="np")
    got = CodecFeatures.from_config(extractor.to_dict())(clips)
    assert got["input_values"].shape == expected["input_values"].shape == (2, 1, 3200)
    assert np.abs(got["input_values"] - expected["input_values"]).max() <= 1e-5


def test_validate(built, tmp_path):
    _, _, hf_dir, package = built
    report = validate_package(shutil.copytree(package, tmp_path / "copy"), hf_dir)
    assert report.passed and report.tokens_agree is True, report.summary()
    assert set(report.diffs) == {"audio_values[1 codebooks]", "audio_values[3 codebooks]"}


def test_unbuilt_configs_are_refused(tmp_path, capsys):
    """One line each on stderr, exit code 1, naming the setting."""
    refusals = {
        "semantic_model_config is a 'wav2vec2' model": dict(
            semantic_model_config=dict(SEMANTIC, model_type="wav2vec2")
        ),
        "do_stable_layer_norm is not built": dict(
            semantic_model_config=dict(SEMANTIC, do_stable_layer_norm=True)
        ),
        "channel_ratios [1, 2] must end at the semantic width": dict(channel_ratios=[1, 2]),
        "leave no codebook": dict(target_bandwidths=[1.0]),
    }
    for i, (message, change) in enumerate(refusals.items()):
        source = tmp_path / f"hf-{i}"
        transformers.AutoConfig.for_model("xcodec", **{**XCODEC, **change}).save_pretrained(source)
        capsys.readouterr()
        assert main(["build", "--model", str(source), str(tmp_path / f"out-{i}"), "-q"]) == 1
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err


def test_weight_norm_checkpoint_builds_the_same(tmp_path):
    """Acoustic convolutions saved under weight norm (``XcodecModel.apply_weight_norm``, as the
    original checkpoints hold them) are folded; the HuBERT positional conv's norm (over the
    kernel taps) is not folded over the wrong axis."""
    from mobius_audio.testing._codec_parity import compare_codec, make_random_codec

    model = make_random_codec(transformers.AutoConfig.for_model("xcodec", **XCODEC))
    model.apply_weight_norm()
    model.save_pretrained(tmp_path / "hf")
    saved = (tmp_path / "hf/model.safetensors").read_bytes().decode("latin-1")
    assert "acoustic_encoder.conv1.parametrizations.weight.original0" in saved
    assert "semantic_model.encoder.pos_conv_embed.conv.parametrizations" in saved
    package = build_with_cli(tmp_path / "hf", tmp_path / "onnx")
    extractor = transformers.DacFeatureExtractor(**EXTRACTOR)
    batch = extractor(random_clips((900, 700)), sampling_rate=RATE, return_tensors="np")
    compare_codec(model, package, batch["input_values"], "default").assert_close()
