"""``mobius codec`` on an EnCodec of the 48 kHz form (normalised overlapping chunks), through the CLI.

The tiny stereo EnCodec of ``codec_cases/encodec.py`` (``encodec-48khz-chunked``:
group norm, each chunk divided by its RMS, chunks of 606 samples every 545) is
built once. ``mobius codec`` must write the codes transformers' ``encode`` gives
(its chunks one after another, the short last chunk unpadded) and its ``decode``'s
cross-faded audio within 1e-4, with every codebook and at a lower ``--bandwidth``.
The numpy extractor pads as transformers' does with chunks; ``--validate`` passes
and compares the scales too.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import soundfile
import torch
import transformers
from codec_cases.encodec import CASES

from mobius.cli import main
from mobius.errors import MobiusError
from mobius.testing import PARITY_ATOL
from mobius.validate import validate_package
from mobius_audio.codec_features import CodecFeatures
from mobius_audio.codec_runner import AudioCodec
from mobius_audio.testing._codec_parity import build_random_codec, random_clips

MODEL_TYPE, OVERRIDES, _, EXTRACTOR, _ = CASES["encodec-48khz-chunked"]
RATE = EXTRACTOR["sampling_rate"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(torch_model, extractor, hf_dir, package_dir)``, built once."""
    config = transformers.AutoConfig.for_model(MODEL_TYPE, **OVERRIDES)
    extractor = transformers.EncodecFeatureExtractor(**EXTRACTOR)
    root = tmp_path_factory.mktemp("encodec48")
    model, hf_dir, package = build_random_codec(root, config, extractor)
    return model, extractor, hf_dir, package


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """A 0.3 s mono float WAV: four whole chunks and a short one once padded."""
    path = tmp_path_factory.mktemp("clips") / "clip.wav"
    samples = random_clips((int(0.3 * RATE) + 1,), seed=4)[0]
    soundfile.write(str(path), samples, RATE, subtype="FLOAT")
    return path, samples


def transformers_round_trip(model, extractor, samples, bandwidth):
    """transformers' codes ``[K, frames]`` (chunk after chunk) and its audio ``[2, samples]``."""
    inputs = extractor(np.stack([samples] * 2), sampling_rate=RATE, return_tensors="pt")
    with torch.no_grad():
        encoded = model.encode(**inputs, bandwidth=bandwidth)
        pad = encoded.last_frame_pad_length
        audio = model.decode(encoded.audio_codes, encoded.audio_scales, inputs["padding_mask"],
                             last_frame_pad_length=pad).audio_values  # fmt: skip
    chunks = list(encoded.audio_codes[:, 0])
    chunks[-1] = chunks[-1][..., : chunks[-1].shape[-1] - pad]
    return torch.cat(chunks, dim=-1).numpy(), audio[0, :, : samples.size].numpy()


@pytest.mark.parametrize("bandwidth, stages", [(8.0, 2), (16.0, 4)])
def test_round_trip_matches_transformers(built, clip, bandwidth, stages, capsys, tmp_path):
    model, extractor, _, package = built
    path, samples = clip
    out, codes_file = tmp_path / "out.wav", tmp_path / "codes.npy"
    capsys.readouterr()
    code = main(["codec", str(package), str(path), "--output", str(out), "--codes",
                 str(codes_file), "--bandwidth", str(bandwidth)])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    expected_codes, expected_audio = transformers_round_trip(model, extractor, samples, bandwidth)
    assert expected_codes.shape == (stages, 4 * 101 + 11)
    codes = np.load(codes_file)
    assert codes.shape == expected_codes.shape and np.array_equal(codes, expected_codes)
    assert len(np.unique(codes[0])) > 1
    audio, rate = soundfile.read(str(out), dtype="float32")
    assert rate == RATE and audio.T.shape == expected_audio.shape
    assert np.abs(audio.T - expected_audio).max() <= PARITY_ATOL


@pytest.mark.parametrize("channels", [1, 2])
def test_numpy_features_pad_chunks_as_transformers(channels):
    """``(ceil(longest / stride) - 1) * stride + chunk_length`` samples; one clip or two."""
    extractor = transformers.EncodecFeatureExtractor(**dict(EXTRACTOR, feature_size=channels))
    ours = CodecFeatures.from_config(extractor.to_dict())
    clips = random_clips((1500, 545, 1091), seed=6, channels=channels)
    for batch in (clips, clips[1:2], clips[2:]):
        expected = extractor(batch, sampling_rate=RATE, return_tensors="np")
        got = ours(batch)
        assert got["input_values"].shape == expected["input_values"].shape
        assert np.abs(got["input_values"] - expected["input_values"]).max() <= 1e-5
        assert np.array_equal(got["padding_mask"], expected["padding_mask"])


def test_validate_compares_scales(built, tmp_path):
    _, _, hf_dir, package = built
    report = validate_package(shutil.copytree(package, tmp_path / "copy"), hf_dir)
    assert report.passed and report.tokens_agree is True, report.summary()
    assert set(report.diffs) == {
        "audio_scales",
        "audio_values[1 codebooks]",
        "audio_values[4 codebooks]",
    }


def test_decoder_needs_the_scales(built):
    codec = AudioCodec(built[3])
    codes, scales = codec.encode_with_scales(random_clips((700,), seed=1)[0])
    assert scales.shape == (1, 3) and (scales > 0).all()  # two whole chunks, a short one
    with pytest.raises(MobiusError, match="decoder needs audio_scales"):
        codec.decode(codes)
