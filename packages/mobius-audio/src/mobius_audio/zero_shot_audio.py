"""Zero-shot audio classification with a built CLAP package, as transformers' pipeline does it.

A ``zero-shot-audio-classification`` package (:mod:`mobius_audio.tasks_zero_shot`)
scores each audio file against candidate labels: the file is decoded and resampled
to the extractor's rate (:func:`mobius_audio.audio_file.read_audio`), made into
log-mel features by :class:`mobius_audio.clap_features.ClapFeatures` (numpy), the
labels go through the package's tokenizer as ``"This is a sound of {label}."``
(padded together), and the scores are the softmax of ``logits_per_audio`` over the
labels, as transformers' ``zero-shot-audio-classification`` pipeline computes them.
A clip longer than the extractor's ``max_length_s`` is cut at a random offset (a fused
package: three random crops fused with the whole), as transformers does (seed
``numpy.random`` for repeatable scores).

Example::

    from mobius_audio.zero_shot_audio import classify_zero_shot

    classify_zero_shot("clap-out/", "dog.wav", ["dog barking", "rain"])
    # [("dog barking", 0.93), ("rain", 0.07)]

Command line: ``mobius classify clap-out/ dog.wav --labels "dog barking,rain"``.
Needs ONNX Runtime and soundfile: ``pip install mobius-audio[run]``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mobius.classification import format_line, open_session, ranked, softmax
from mobius.errors import MobiusError
from mobius.generate import PackageError, _read_json, load_tokenizer, read_graph
from mobius_audio.audio_file import read_audio
from mobius_audio.clap_features import ClapFeatures

#: transformers' zero-shot audio pipeline's hypothesis template.
HYPOTHESIS_TEMPLATE = "This is a sound of {}."
OUTPUT = "logits_per_audio"


def is_zero_shot_audio_package(package_dir: str | os.PathLike) -> bool:
    """Whether the package's ``model.onnx`` is an audio–text dual encoder's (``logits_per_audio`` out)."""
    graph = Path(package_dir) / "model.onnx"
    if not graph.is_file():
        return False

    model = read_graph(graph)  # PackageError if not ONNX
    return any(o.name == OUTPUT for o in model.graph.output)


def _audio_sizes(config: dict, package_dir: Path) -> tuple[int, int]:
    """``(num_mel_bins, max_frames)`` of the package's audio tower, checked."""
    audio = config.get("audio_config")
    if not isinstance(audio, dict):
        raise PackageError(f"{package_dir}/config.json has no audio_config")
    mels, spec = audio.get("num_mel_bins"), audio.get("spec_size")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (mels, spec)):
        raise PackageError(
            f"{package_dir}/config.json: num_mel_bins and spec_size must be positive ints"
        )
    return mels, spec * (spec // mels)


class ZeroShotAudioClassifier:
    """A CLAP package in ONNX Runtime, with its feature extractor and tokenizer."""

    _tokenizer = None

    def __init__(self, package_dir: str | os.PathLike, *, threads: int | None = None) -> None:
        self.package_dir = Path(package_dir)
        if not is_zero_shot_audio_package(self.package_dir):
            raise PackageError(f"{self.package_dir} is not a zero-shot audio package (CLAP)")
        self.session = open_session(self.package_dir / "model.onnx", threads)
        self.features = ClapFeatures.from_package(self.package_dir)
        mels, max_frames = _audio_sizes(
            _read_json(self.package_dir / "config.json"), self.package_dir
        )
        if self.features.mel_filters.shape[1] != mels or self.features.frames > max_frames:
            raise PackageError(
                f"{self.package_dir}: the extractor makes {self.features.frames} frames of "
                f"{self.features.mel_filters.shape[1]} mel bins; the audio tower takes up to "
                f"{max_frames} frames of {mels}"
            )
        channels = {i.name: i.shape for i in self.session.get_inputs()}["input_features"][1]
        if channels != (4 if self.features.fused else 1):
            raise PackageError(
                f"{self.package_dir}: the graph takes {channels} spectrograms per clip; the "
                f"extractor's truncation makes {4 if self.features.fused else 1}"
            )

    @property
    def tokenizer(self):
        """The package's tokenizer (``transformers.AutoTokenizer``, no remote code), on first use."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.package_dir)
        return self._tokenizer

    def text_feeds(self, labels: Sequence[str]) -> dict[str, np.ndarray]:
        """``input_ids`` and ``attention_mask`` of the label texts, padded together."""
        batch = self.tokenizer(
            [HYPOTHESIS_TEMPLATE.format(label) for label in labels], padding=True
        )
        input_ids = np.asarray(batch["input_ids"], np.int64)
        return {
            "input_ids": input_ids,
            "attention_mask": np.asarray(batch["attention_mask"], np.int64),
        }

    def require_labels(self, labels: Sequence[str] | None) -> None:
        """Refuse a call without candidate labels (one line)."""
        if not labels:
            raise MobiusError(
                f"{self.package_dir} is a zero-shot audio classifier: give the candidate labels "
                "with --labels a,b,c"
            )

    def scores(self, audio, labels: Sequence[str]) -> list[tuple[str, float]]:
        """Every label with its score for ``audio`` (a file path, or mono samples at the
        extractor's rate), in label order."""
        self.require_labels(labels)
        if isinstance(audio, (str, os.PathLike)):
            audio = read_audio(audio, self.features.sampling_rate)
        feeds = {**self.text_feeds(labels), **self.features([audio])}
        (logits,) = self.session.run([OUTPUT], feeds)
        return list(zip(labels, softmax(np.asarray(logits[0], np.float32)).tolist(), strict=True))


def classify_zero_shot(
    package_dir: str | os.PathLike, audio, labels: Sequence[str], top: int = 5
) -> list[tuple[str, float]]:
    """The ``top`` likeliest ``(label, score)`` of one clip (a file or samples), likeliest first."""
    return ranked(ZeroShotAudioClassifier(package_dir).scores(audio, labels), top)


def run_cli(package_dir: str | os.PathLike, inputs: list[str], options: dict) -> int:
    """mobius-audio's ``mobius classify`` runner for CLAP: a line of top labels per audio file."""
    value = options.get("labels")
    labels = [label.strip() for label in (value or "").split(",") if label.strip()]
    classifier = ZeroShotAudioClassifier(package_dir, threads=options.get("threads"))
    classifier.require_labels(labels)  # before any file is read
    for path in inputs:
        print(format_line(path, ranked(classifier.scores(path, labels), options["top"])))
    return 0
