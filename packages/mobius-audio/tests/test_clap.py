"""CLAP: synthetic parity, the numpy feature extractor, and ``mobius classify`` against the pipeline.

Two tiny random CLAPs (:mod:`_clap_tiny`), an unfused and a fused one, are built once
each by the ``mobius build`` path; every test reuses them.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from mobius.cli import main
from mobius.testing import PARITY_ATOL
from mobius_audio.testing._clap_parity import check_clap_parity, random_clips

sys.path.insert(0, str(Path(__file__).parent))
from _clap_tiny import (  # noqa: E402
    EXTRACTOR_OPTIONS,
    FUSED_EXTRACTOR_OPTIONS,
    tiny_clap_config,
    tiny_fused_clap_config,
)

pytest.importorskip("torch")
LABELS = ["dog barking", "rain"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(parity results, hf dir, package dir)`` of the tiny CLAP."""
    workdir = tmp_path_factory.mktemp("clap")
    results = check_clap_parity(tiny_clap_config(), EXTRACTOR_OPTIONS, workdir)
    return results, workdir / "hf", workdir / "onnx-default"


#: Parity case -> (model_type, the fixture that built and compared it, its execution providers).
CASES = {
    "clap": ("clap", "built", ["default", "cpu"]),
    "clap-fused": ("clap", "fused", ["default"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_clap_parity(case, request):
    """Both embeddings and both logits of two clips against two padded labels, within 1e-4
    (the fused CLAP: a cropped 1.5 s clip through mel_conv2d and the attentional fusion)."""
    _, fixture, eps = CASES[case]
    results = request.getfixturevalue(fixture)[0]
    assert [r.ep for r in results] == eps
    for result in results:
        assert max(result.diffs.values()) <= PARITY_ATOL, (result.ep, result.diffs)


@pytest.mark.parametrize("padding", ["repeatpad", "repeat", "pad"])
def test_features_match_transformers(padding):
    """The numpy extractor equals ClapFeatureExtractor (rand_trunc) within 1e-5, a long clip included."""
    from transformers import ClapFeatureExtractor

    from mobius_audio.clap_features import ClapFeatures

    reference = ClapFeatureExtractor(truncation="rand_trunc", padding=padding, **EXTRACTOR_OPTIONS)
    ours = ClapFeatures(padding=padding, **EXTRACTOR_OPTIONS)
    clips = random_clips((3000, 16_000, 21_000), seed=3)  # shorter, exact, longer (a random cut)
    np.random.seed(7)
    expected = reference(clips, sampling_rate=16_000, return_tensors="np")["input_features"]
    np.random.seed(7)  # the same draw of the long clip's offset
    got = ours(clips)["input_features"]
    assert got.shape == expected.shape == (3, 1, ours.frames, 16)
    assert np.abs(got - expected).max() <= 1e-5


@pytest.fixture(scope="module")
def clip_file(tmp_path_factory):
    """A 0.3 s WAV at 16 kHz and its samples as ``read_audio`` returns them."""
    soundfile = pytest.importorskip("soundfile")
    from mobius_audio.audio_file import read_audio

    path = tmp_path_factory.mktemp("clap-audio") / "clip.wav"
    soundfile.write(path, random_clips((4800,), seed=5)[0], 16_000, subtype="FLOAT")
    return path, read_audio(path, 16_000)


def _printed_scores(line: str) -> dict[str, float]:
    pairs = re.findall(r"([^:;]+?) (\d\.\d+)(?:;|$)", line.split(": ", 1)[1])
    return {label.strip(): float(score) for label, score in pairs}


def _cli_and_pipeline_scores(hf_dir, package, path, samples, capsys, seed: int = 0):
    """``mobius classify`` on ``path`` and transformers' pipeline on ``samples``, each after
    ``numpy.random.seed(seed)`` (the same random crops): two ``{label: score}``."""
    from transformers import AutoFeatureExtractor, AutoTokenizer, ClapModel, pipeline

    np.random.seed(seed)
    assert main(["classify", str(package), str(path), "--labels", ",".join(LABELS)]) == 0
    got = _printed_scores(capsys.readouterr().out.strip())
    classifier = pipeline(
        "zero-shot-audio-classification",
        model=ClapModel.from_pretrained(hf_dir).eval(),
        feature_extractor=AutoFeatureExtractor.from_pretrained(hf_dir),
        tokenizer=AutoTokenizer.from_pretrained(hf_dir),
    )
    np.random.seed(seed)
    expected = {r["label"]: r["score"] for r in classifier(samples, candidate_labels=LABELS)}
    return got, expected


def test_classify_cli_matches_pipeline(built, clip_file, capsys):
    """``mobius classify PKG clip.wav --labels ...`` prints transformers' pipeline scores."""
    path, samples = clip_file
    got, expected = _cli_and_pipeline_scores(built[1], built[2], path, samples, capsys)
    assert got.keys() == expected.keys()
    assert max(abs(got[k] - expected[k]) for k in LABELS) <= 1e-5, (got, expected)
    assert len(set(expected.values())) == 2, "the labels should score apart"


def test_classify_refusals(built, clip_file, tmp_path, capsys):
    """No labels, a missing file and an unreadable one: exit 1 with a one-line error naming it."""
    package, (path, _) = built[2], clip_file
    broken = tmp_path / "broken.wav"
    broken.write_text("not audio")
    cases = (
        ([str(path)], "give the candidate labels"),
        ([str(tmp_path / "missing.wav"), "--labels", "a,b"], "missing.wav"),
        ([str(broken), "--labels", "a,b"], "broken.wav"),
    )
    for args, message in cases:
        capsys.readouterr()
        code = main(["classify", str(package), *args])
        captured = capsys.readouterr()
        assert code == 1 and not captured.out, (args, captured)
        assert message in captured.err and len(captured.err.strip().splitlines()) == 1, captured.err


@pytest.fixture(scope="module")
def fused(tmp_path_factory):
    """``(parity results, hf dir, package dir)`` of the tiny fused CLAP: a 1.5 s clip
    (cropped and fused) beside a 0.25 s one (padded, not fused)."""
    workdir = tmp_path_factory.mktemp("clap-fused")
    config = tiny_fused_clap_config()
    results = check_clap_parity(
        config, FUSED_EXTRACTOR_OPTIONS, workdir, lengths=(24_000, 4000), eps=("default",)
    )
    return results, workdir / "hf", workdir / "onnx-default"


def test_fusion_changes_the_embedding(fused):
    """Where is_longer, the fused crops change the audio embedding (the fused parity case
    could not fail without it)."""
    import onnxruntime as ort
    from transformers import ClapFeatureExtractor

    from mobius_audio.testing._clap_parity import transformers_feeds

    extractor = ClapFeatureExtractor.from_pretrained(fused[1])
    texts = ["This is a sound of dog barking.", "This is a sound of rain."]
    feeds = transformers_feeds(extractor, random_clips((24_000, 4000)), texts)
    assert feeds["is_longer"].ravel().tolist() == [True, False]
    session = ort.InferenceSession(str(fused[2] / "model.onnx"), providers=["CPUExecutionProvider"])
    (fused_embeds,) = session.run(["audio_embeds"], feeds)
    (plain_embeds,) = session.run(["audio_embeds"], {**feeds, "is_longer": ~feeds["is_longer"]})
    assert np.abs(fused_embeds - plain_embeds).max(axis=1).min() > 1e-3


def test_fused_features_match_transformers():
    """Fusion features: the crops, the padded clips and is_longer equal transformers'; the
    shrunk whole clip within float32 rounding of torch's bilinear kernel (see below)."""
    from transformers import ClapFeatureExtractor

    from mobius_audio.clap_features import ClapFeatures

    options = dict(FUSED_EXTRACTOR_OPTIONS, truncation="fusion")
    reference, ours = ClapFeatureExtractor(**options), ClapFeatures(**options)
    for lengths in ((24_000, 3000, 16_000, 40_000), (3000, 5000)):  # none longer: one marked
        clips = random_clips(lengths, seed=4)
        np.random.seed(9)
        expected = reference(clips, sampling_rate=16_000, return_tensors="np")
        np.random.seed(9)
        got = ours(clips)
        assert (got["is_longer"] == expected["is_longer"]).all()
        want = expected["input_features"]
        assert np.abs(got["input_features"][:, 1:] - want[:, 1:]).max() <= 1e-5
        for clip, mine, theirs in zip(clips, got["input_features"], want, strict=True):
            diff = np.abs(mine[0] - theirs[0])
            assert (diff <= 1e-5 + _shrink_rounding(ours, clip)).all(), diff.max()


def _shrink_rounding(features, clip: np.ndarray) -> np.ndarray:
    """What one float32 ulp of the source row moves a shrunk long clip's values by.

    torch's bilinear kernel rounds some rows' float32 source coordinate one ulp (4e-6 near
    row 32) away from every numpy order of the same formula tried; each value then moves by
    that ulp times the spectrogram's slope between its two rows (up to 3e-5 dB measured).
    """
    if len(clip) <= features.max_samples:
        return np.zeros(())
    full = features.log_mel(np.asarray(clip, np.float64))
    rows = np.arange(features.frames)
    source = np.maximum((rows + 0.5) * len(full) / features.frames - 0.5, 0)
    first = np.minimum(np.floor(source).astype(int), len(full) - 1)
    second = np.minimum(first + 1, len(full) - 1)
    slope = np.abs(full[second] - full[first])
    return 2 * np.spacing(np.float32(len(full))) * slope


def test_fused_classify_cli_matches_pipeline(fused, tmp_path, capsys):
    """A 1.5 s file through a fused package: the same crops (seeded), the pipeline's scores."""
    soundfile = pytest.importorskip("soundfile")
    from mobius_audio.audio_file import read_audio

    _, hf_dir, package = fused
    path = tmp_path / "long.wav"
    soundfile.write(path, random_clips((24_000,), seed=6)[0], 16_000, subtype="FLOAT")
    samples = read_audio(path, 16_000)
    got, expected = _cli_and_pipeline_scores(hf_dir, package, path, samples, capsys, seed=3)
    assert max(abs(got[k] - expected[k]) for k in LABELS) <= 1e-5, (got, expected)


def test_channel_map_fusion_refused():
    """fusion_type='channel_map' (which transformers cannot run) is refused with the reason."""
    from mobius.errors import ConfigError
    from mobius_audio.models.clap import ClapConfig

    config = tiny_fused_clap_config()
    config.audio_config.fusion_type = "channel_map"
    with pytest.raises(ConfigError, match="channel_map"):
        ClapConfig.from_hf(config)


def test_extractor_that_does_not_fit_the_graph_refused(built, tmp_path, capsys):
    """An unfused package whose extractor says truncation='fusion' fails in one line."""
    import json

    copy = Path(shutil.copytree(built[2], tmp_path / "mismatch"))
    config_path = copy / "preprocessor_config.json"
    config = json.loads(config_path.read_text())
    config.update(truncation="fusion", feature_size=64)
    config_path.write_text(json.dumps(config))
    assert main(["classify", str(copy), "x.wav", "--labels", "a,b"]) == 1
    err = capsys.readouterr().err.strip()
    assert "mel bins" in err and len(err.splitlines()) == 1, err


def test_validate_passes_and_catches_a_changed_weight(built, tmp_path, monkeypatch):
    """``--validate``'s check: the package passes against ClapModel, a changed weight fails,
    and without torch the smoke run passes."""
    from mobius.testing import assert_smoke_passes, assert_validation_fails, broken_copy
    from mobius.validate import validate_package

    _, source, package = built
    report = validate_package(shutil.copytree(package, tmp_path / "copy"), source)
    assert report.passed and report.reference == "transformers ClapModel", report.summary()
    assert len(report.diffs) == 4 and max(report.diffs.values()) <= PARITY_ATOL, report.diffs
    weight = "audio_model.audio_encoder.batch_norm.weight"
    assert_validation_fails(broken_copy(package, tmp_path / "broken", "model.onnx", weight), source)
    summary = assert_smoke_passes(package, source, monkeypatch, tmp_path / "smoke")
    assert "2 synthetic clips" in summary
