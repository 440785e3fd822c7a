"""AST through the CLI: the numpy fbank extractor and ``mobius classify`` against transformers.

``ASTFeatures`` (numpy only) must give transformers' ``ASTFeatureExtractor`` frames
within 1e-5: its numpy path here (torchaudio is not installed; with torchaudio,
transformers takes Kaldi's fbank, which that path is written to match). A tiny
random ``ASTForAudioClassification`` (every parameter perturbed) with a 50-frame
window of 20 mel bins is built once with the CLI (``--validate``: checked against
transformers, and in a torch-free smoke run); ``mobius classify PKG a.wav b.wav``
must print the labels of transformers' ``audio-classification`` pipeline in its
order with its scores within 1e-5. The clips (``test_audio_encoders_run``'s 0.6 s and
0.45 s) make 58 and 43 frames: one is cut to the 50-frame window, one padded.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import test_audio_encoders_run as encoders_run
import transformers
from audio_encoder_cases.audio_spectrogram_transformer import AST
from test_audio_encoders_run import RATE, assert_pipeline_lines, run_cli
from transformers import AutoConfig

import mobius_audio
from mobius.testing import assert_smoke_passes, build_with_cli
from mobius_audio.ast_features import ASTFeatures
from mobius_audio.encoders import AudioClassifier
from mobius_audio.testing import make_random_audio_model

ATOL = 1e-5
LABELS = {0: "speech", 1: "music", 2: "dog bark"}
wavs = encoders_run.clips  # its two WAV files, a fixture here too
EXTRACTOR = dict(num_mel_bins=AST["num_mel_bins"], max_length=AST["max_length"])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(hf_dir, package_dir)`` of a tiny random AST classifier, built once."""
    root = tmp_path_factory.mktemp("ast")
    config = AutoConfig.for_model("audio-spectrogram-transformer", **AST, id2label=LABELS)
    hf_dir = root / "hf"
    make_random_audio_model(config, "sequence-classification").save_pretrained(hf_dir)
    transformers.ASTFeatureExtractor(**EXTRACTOR).save_pretrained(hf_dir)
    return hf_dir, build_with_cli(hf_dir, root / "onnx", "--validate")


@pytest.mark.parametrize("normalize", [True, False])
def test_numpy_features_equal_transformers(wavs, normalize):
    reference = transformers.ASTFeatureExtractor(**EXTRACTOR, do_normalize=normalize)
    ours = ASTFeatures.from_dict(reference.to_dict())
    waves = [samples for _, samples in wavs]
    expected = reference(waves, sampling_rate=RATE, return_tensors="np")["input_values"]
    got = ours(waves, sampling_rate=RATE)["input_values"]
    assert got.shape == expected.shape == (2, AST["max_length"], AST["num_mel_bins"])
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, atol=ATOL, rtol=0)
    # the shorter clip is padded in the log-mel domain: zeros, normalised or not
    padding = (0 - reference.mean) / (2 * reference.std) if normalize else 0.0
    np.testing.assert_allclose(got[1, -5:], padding, atol=ATOL)


def test_classify_matches_the_pipeline(built, wavs, capsys):
    hf_dir, package = built
    pipe = transformers.pipeline("audio-classification", model=str(hf_dir))
    expected = [pipe({"raw": samples, "sampling_rate": RATE}, top_k=3) for _, samples in wavs]
    assert [e[0]["label"] for e in expected] != [expected[0][0]["label"]] * 2 or (
        abs(expected[0][0]["score"] - expected[1][0]["score"]) > 1e-3
    ), f"both clips score alike: {expected}"

    code, lines, err = run_cli(capsys, "classify", package, *(p for p, _ in wavs), "--top", "3")
    assert code == 0, err
    assert_pipeline_lines(lines, wavs, expected)
    got = mobius_audio.classify_audio(package, wavs[1][1], sampling_rate=RATE, top=1)
    assert got[0][0] == expected[1][0]["label"]
    # the runner featurises with numpy, not transformers' torch-bound extractor
    assert isinstance(AudioClassifier(package).feature_extractor, ASTFeatures)


def test_refusals(built, wavs, capsys, tmp_path):
    """An AST classifier given to ``mobius generate``, a bad extractor config: one line each."""
    _, package = built
    code, lines, err = run_cli(capsys, "generate", package, wavs[0][0])
    assert code == 1 and "is an audio classifier: run it with 'mobius classify" in err, err
    with pytest.raises(mobius_audio.ast_features.PackageError, match="num_mel_bins"):
        ASTFeatures.from_dict({"num_mel_bins": "128"})
    with pytest.raises(mobius_audio.ast_features.PackageError, match="std is 0"):
        ASTFeatures.from_dict({"std": 0})


def test_build_validates(built, monkeypatch, tmp_path):
    """``--validate`` compared both outputs with transformers; the torch-free smoke run passes."""
    hf_dir, package = built
    validation = json.loads((package / "mobius.json").read_text())["validation"]
    assert validation["passed"] is True, validation
    assert set(validation["diffs"]) == {"last_hidden_state", "logits"}
    assert validation["reference"] == "transformers ASTForAudioClassification"
    assert_smoke_passes(package, hf_dir, monkeypatch, tmp_path / "copy")
