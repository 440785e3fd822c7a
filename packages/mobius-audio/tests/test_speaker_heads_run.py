"""The frame-classification and x-vector heads run through the CLI as transformers runs them.

A tiny random wav2vec2 (every parameter perturbed, weights wide enough that the
sigmoids sit away from 0.5) is saved as ``Wav2Vec2ForAudioFrameClassification``
with three labels and as ``Wav2Vec2ForXVector``, with a feature extractor that
returns the mask; each is built once with the CLI, ``--validate`` passing. transformers has no pipeline
for either: the reference is its feature extractor and model on each clip, as
its diarization and speaker-verification examples run them.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
import torch
import transformers
from audio_encoder_cases.wav2vec2 import WAV2VEC2, XVECTOR
from test_audio_encoders_run import RATE, run_cli, write_wav
from transformers import AutoConfig

import mobius_audio
from mobius.testing import build_with_cli
from mobius_audio.speaker_heads import Segment, cosine_similarity, segments
from mobius_audio.testing import make_random_audio_model

ATOL = 1e-5
LABELS = {0: "alice", 1: "bob", 2: "carol"}
HEADS = {"frames": "audio-frame-classification", "xvector": "xvector"}


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """Three WAV files of different lengths and pitches: ``[(path, samples)]``."""
    folder = tmp_path_factory.mktemp("clips")
    specs = [("a.wav", 0.5, 440.0), ("b.wav", 0.35, 1300.0), ("c.wav", 0.4, 520.0)]
    return [
        (str(folder / name), write_wav(folder / name, seconds, pitch, seed))
        for seed, (name, seconds, pitch) in enumerate(specs)
    ]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``built(case)``: ``(torch model, feature extractor, package_dir)``, made once per module."""
    root = tmp_path_factory.mktemp("speaker-heads")

    @functools.cache
    def build(case: str):
        config = AutoConfig.for_model(
            "wav2vec2", **dict(WAV2VEC2, **XVECTOR, feat_extract_norm="layer"), id2label=LABELS
        )
        model = make_random_audio_model(config, HEADS[case])
        hf_dir = root / f"hf-{case}"
        model.save_pretrained(hf_dir)
        extractor = transformers.Wav2Vec2FeatureExtractor(
            feature_size=1, sampling_rate=RATE, do_normalize=True, return_attention_mask=True
        )
        extractor.save_pretrained(hf_dir)
        package = build_with_cli(hf_dir, root / f"onnx-{case}", "--validate")
        validation = json.loads((package / "mobius.json").read_text())["validation"]
        assert validation["passed"] is True, validation  # --validate knows the head
        return model, extractor, package

    return build


def reference(model, extractor, samples):
    """transformers' output for one clip, as its examples run the head."""
    features = extractor(samples, sampling_rate=RATE, return_tensors="pt")
    with torch.no_grad():
        return model(**features)


def test_segments_merge_runs_of_the_same_labels():
    probabilities = np.array([[0.9, 0.1], [0.8, 0.2], [0.7, 0.6], [0.1, 0.2], [0.2, 0.9]])
    assert segments(probabilities, ["a", "b"], 0.02) == [
        Segment(0.0, 0.04, ("a",)),
        Segment(0.04, 0.06, ("a", "b")),
        Segment(0.08, 0.1, ("b",)),
    ]


def test_frame_classification_matches_transformers(built, clips, capsys):
    model, extractor, package = built("frames")
    hop = 5 * 2 * 2 / RATE  # the conv strides of WAV2VEC2
    expected, changes = [], 0
    for path, samples in clips:
        probabilities = torch.sigmoid(reference(model, extractor, samples).logits[0]).numpy()
        # ORT and PyTorch agree within ATOL: a sigmoid nearer 0.5 could flip a label
        assert np.abs(probabilities - 0.5).min() > ATOL, "a sigmoid too close to 0.5"
        got = mobius_audio.classify_frames(package, samples, sampling_rate=RATE)
        found = segments(probabilities, list(LABELS.values()), hop)
        assert got == found
        changes += len(found)
        expected += [f"{path} [{s.start:.2f} -> {s.end:.2f}] {', '.join(s.labels)}" for s in found]
    assert changes > len(clips), f"the labels never change within a clip: {expected}"

    code, lines, err = run_cli(capsys, "classify", package, *(p for p, _ in clips))
    assert code == 0, err
    assert lines == expected


def test_frame_probabilities_within_tolerance(built, clips):
    from mobius_audio.speaker_heads import FrameClassifier

    model, extractor, package = built("frames")
    path, samples = clips[1]
    expected = torch.sigmoid(reference(model, extractor, samples).logits[0]).numpy()
    got = FrameClassifier(package).probabilities(path)
    np.testing.assert_allclose(got, expected, atol=ATOL, rtol=0)


def test_speaker_similarity_matches_transformers(built, clips, capsys, tmp_path):
    model, extractor, package = built("xvector")
    vectors = np.stack([reference(model, extractor, s).embeddings[0].numpy() for _, s in clips])
    output = tmp_path / "embeddings.npy"

    code, lines, err = run_cli(
        capsys, "speaker", package, *(p for p, _ in clips), "--output", output
    )

    assert code == 0, err
    assert lines[-1] == f"wrote {output} [3, {XVECTOR['xvector_output_dim']}]"
    np.testing.assert_allclose(np.load(output), vectors, atol=ATOL, rtol=0)
    for line, (path, _), vector in zip(lines[:-1], clips[1:], vectors[1:], strict=True):
        name, _, rest = line.partition(": ")
        assert name == path and rest.endswith(f"(cosine similarity to {clips[0][0]})")
        similarity = float(rest.split()[0])
        assert abs(similarity - cosine_similarity(vectors[0], vector)) <= ATOL
    got = mobius_audio.speaker_embedding(package, clips[2][1], sampling_rate=RATE)
    np.testing.assert_allclose(got, vectors[2], atol=ATOL, rtol=0)


def test_refusals(built, clips, capsys, tmp_path):
    """Each is one line on stderr, exit code 1, and names the problem."""
    _, _, frames = built("frames")
    _, _, xvector = built("xvector")
    audio = clips[0][0]
    refusals = {
        "embeds speakers (an x-vector head): run it with 'mobius speaker": (
            "classify", xvector, audio,
        ),
        "classifies frames (diarization): run it with 'mobius classify": (
            "generate", frames, audio,
        ),
        "has a audio-frame-classification head, not xvector": ("speaker", frames, audio, audio),
        "--labels applies to zero-shot packages": ("classify", frames, audio, "--labels", "a,b"),
        "no such file": ("speaker", xvector, audio, tmp_path / "missing.wav"),
        "give two or more audio files": ("speaker", xvector, audio),
        "cannot write": ("speaker", xvector, audio, "--output", tmp_path / "no" / "e.npy"),
    }  # fmt: skip
    for message, args in refusals.items():
        code, lines, err = run_cli(capsys, *args)
        assert code == 1 and not lines, (message, lines, err)
        assert len(err.strip().splitlines()) == 1 and message in err, err
