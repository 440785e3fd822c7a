"""Audio encoders with a head run as transformers' pipelines run them, through the CLI.

A tiny random wav2vec2 (every parameter perturbed) is saved twice: ``Wav2Vec2ForCTC``
with a ``Wav2Vec2CTCTokenizer`` of 12 symbols and a feature extractor that returns
the attention mask, and ``Wav2Vec2ForSequenceClassification`` (group-norm
features, no mask, as base wav2vec2 checkpoints are) with three labels. Each is
built once with the CLI. ``mobius generate PKG clip.wav`` must print the text
transformers' ``automatic-speech-recognition`` pipeline gives for the same samples;
``mobius classify PKG a.wav b.wav`` the labels of its ``audio-classification``
pipeline in the same order with the same scores (within 1e-5).
"""

from __future__ import annotations

import functools
import json
import wave
from itertools import groupby

import numpy as np
import pytest
import transformers
from audio_encoder_cases.wav2vec2 import WAV2VEC2
from transformers import AutoConfig

import mobius_audio
from mobius.cli import main
from mobius.testing import build_with_cli
from mobius_audio.testing import make_random_audio_model

RATE = 16000
SCORE_ATOL = 1e-5
LABELS = {0: "speech", 1: "music, live", 2: "silence"}
# The word delimiter "|" sits at an id the random model emits often: the text has spaces.
CTC_VOCAB = ["<pad>", "<s>", "</s>", "<unk>", *"ABC", "|", *"DEFG"]

#: case -> (head, config overrides, whether the extractor returns the attention mask).
CASES = {
    "ctc": ("ctc", dict(feat_extract_norm="layer", do_stable_layer_norm=True), True),
    "classifier": ("sequence-classification", dict(feat_extract_norm="group"), False),
}


def write_wav(path, seconds: float, pitch: float, seed: int) -> np.ndarray:
    """A tone with noise as 16-bit PCM; returns the samples as a reader decodes them."""
    t = np.arange(int(seconds * RATE)) / RATE
    rng = np.random.default_rng(seed)
    audio = 0.4 * np.sin(2 * np.pi * pitch * t) + 0.1 * rng.standard_normal(t.shape)
    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE)
        wav.writeframes(pcm.tobytes())
    return (pcm / 32768).astype(np.float32)


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """Two WAV files of different lengths and pitches: ``[(path, samples)]``."""
    folder = tmp_path_factory.mktemp("clips")
    return [
        (str(folder / "a.wav"), write_wav(folder / "a.wav", 0.6, 440.0, 0)),
        (str(folder / "b.wav"), write_wav(folder / "b.wav", 0.45, 1300.0, 1)),
    ]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``built(case)``: ``(hf_dir, package_dir)``, made and built once per module."""
    root = tmp_path_factory.mktemp("encoders")

    @functools.cache
    def build(case: str):
        head, overrides, with_mask = CASES[case]
        hf_dir = root / f"hf-{case}"
        config = AutoConfig.for_model("wav2vec2", **dict(WAV2VEC2, **overrides), id2label=LABELS)
        make_random_audio_model(config, head).save_pretrained(hf_dir)
        transformers.Wav2Vec2FeatureExtractor(
            feature_size=1, sampling_rate=RATE, do_normalize=True, return_attention_mask=with_mask
        ).save_pretrained(hf_dir)
        if head == "ctc":
            vocab = root / "vocab.json"
            vocab.write_text(json.dumps({token: i for i, token in enumerate(CTC_VOCAB)}))
            transformers.Wav2Vec2CTCTokenizer(str(vocab)).save_pretrained(hf_dir)
        return hf_dir, build_with_cli(hf_dir, root / f"onnx-{case}")

    return build


def run_cli(capsys, *args) -> tuple[int, list[str], str]:
    capsys.readouterr()  # what came before (a build's report) is not the command's
    code = main([*map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def assert_pipeline_lines(lines: list[str], clips, expected: list[list[dict]]) -> None:
    """``mobius classify``'s ``path: label score; ...`` lines give the pipeline's ranking and scores."""
    for line, (path, _), reference in zip(lines, clips, expected, strict=True):
        name, _, rest = line.partition(": ")
        pairs = [pair.rsplit(" ", 1) for pair in rest.split("; ")]
        assert name == path
        assert [label for label, _ in pairs] == [e["label"] for e in reference]
        np.testing.assert_allclose(
            [float(s) for _, s in pairs], [e["score"] for e in reference], atol=SCORE_ATOL, rtol=0
        )


def test_ctc_transcription_matches_the_pipeline(built, clips, capsys):
    hf_dir, package = built("ctc")
    pipe = transformers.pipeline("automatic-speech-recognition", model=str(hf_dir))
    for path, samples in clips:
        expected = pipe({"raw": samples, "sampling_rate": RATE})["text"]
        code, lines, err = run_cli(capsys, "generate", package, path)
        assert code == 0, err
        assert lines == [expected]
        assert mobius_audio.transcribe_ctc(package, samples, sampling_rate=RATE) == expected

    # The clip exercises the decoding: repeated frames, blanks, words and several symbols.
    assert " " in expected, expected
    frames = transformers.AutoModelForCTC.from_pretrained(hf_dir)
    features = pipe.feature_extractor(clips[0][1], sampling_rate=RATE, return_tensors="pt")
    ids = frames(**features).logits[0].argmax(-1).tolist()
    runs = [len(list(group)) for _, group in groupby(ids)]
    assert max(runs) > 1 and 0 in ids and len(set(ids) - {0}) >= 3, ids


def test_audio_classification_matches_the_pipeline(built, clips, capsys):
    hf_dir, package = built("classifier")
    pipe = transformers.pipeline("audio-classification", model=str(hf_dir))
    expected = [pipe({"raw": samples, "sampling_rate": RATE}, top_k=2) for _, samples in clips]
    assert abs(expected[0][0]["score"] - expected[1][0]["score"]) > 1e-3 or (
        expected[0][0]["label"] != expected[1][0]["label"]
    ), f"both clips score alike: {expected}"

    code, lines, err = run_cli(capsys, "classify", package, *(p for p, _ in clips), "--top", "2")
    assert code == 0, err
    assert_pipeline_lines(lines, clips, expected)
    got = mobius_audio.classify_audio(package, clips[1][1], sampling_rate=RATE, top=3)
    reference = pipe({"raw": clips[1][1], "sampling_rate": RATE}, top_k=3)
    assert [label for label, _ in got] == [e["label"] for e in reference]
    np.testing.assert_allclose(
        [s for _, s in got], [e["score"] for e in reference], atol=SCORE_ATOL
    )


def test_refusals(built, clips, capsys, tmp_path):
    """Each is one line on stderr, exit code 1, and names the problem."""
    _, ctc = built("ctc")
    _, classifier = built("classifier")
    not_audio = tmp_path / "notes.wav"
    not_audio.write_text("not audio")
    refusals = {
        "is an audio classifier: run it with 'mobius classify": ("generate", classifier, clips[0][0]),
        "transcribes speech (a CTC head): run it with 'mobius generate": ("classify", ctc, clips[0][0]),
        "cannot decode": ("classify", classifier, not_audio),
        "no such file": ("generate", ctc, tmp_path / "missing.wav"),
        "--labels applies to zero-shot image packages": (
            "classify", classifier, clips[0][0], "--labels", "a,b",
        ),
        "a CTC package transcribes greedily": ("generate", ctc, clips[0][0], "--do-sample"),
    }  # fmt: skip
    for message, args in refusals.items():
        code, lines, err = run_cli(capsys, *args)
        assert code == 1 and not lines, (message, err)
        assert len(err.strip().splitlines()) == 1 and message in err, err
