"""Run the frame-classification (diarization) and x-vector (speaker) heads of audio encoders.

An ``audio-feature-extraction`` package (:mod:`mobius_audio.tasks`) built from a
``*ForAudioFrameClassification`` checkpoint gives ``logits [batch, frames, num_labels]``;
one built from a ``*ForXVector`` checkpoint gives ``embeddings`` and ``logits``
``[batch, xvector_output_dim]``. The audio goes through the package's own feature
extractor as for the other heads (:class:`mobius_audio.encoders.AudioEncoder`).

- **frames** (:func:`classify_frames`, ``mobius classify PKG clip.wav``): each label is
  active in a frame when its sigmoid is above 0.5, as transformers' diarization
  example reads the logits (labels are independent: speakers may overlap); runs of
  frames with the same active labels make one segment, timed by the frame hop;
- **speakers** (:func:`speaker_embedding`, ``mobius speaker PKG a.wav b.wav``): the
  ``embeddings`` output of each clip; the command prints the cosine similarity of each
  clip to the first, as transformers' speaker-verification example compares them
  (the higher, the likelier the same speaker; the threshold is the model's to choose).

Example::

    import mobius_audio

    for segment in mobius_audio.classify_frames("diarization-out/", "meeting.wav"):
        print(segment.start, segment.end, segment.labels)
    vector = mobius_audio.speaker_embedding("xvector-out/", "alice.wav")

Needs ONNX Runtime and soundfile: ``pip install mobius-audio[run]``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mobius.classification import label_names
from mobius.errors import MobiusError
from mobius.generate import PackageError, read_graph
from mobius_audio.encoders import AudioEncoder, is_audio_encoder_package
from mobius_audio.heads import graph_head

#: A label is active in a frame above this sigmoid, as transformers' diarization example reads it.
ACTIVE = 0.5
#: The fbank frame shift of ``input_features`` extractors (SeamlessM4T's 10 ms).
FBANK_SHIFT_S = 0.01


@dataclass(frozen=True)
class Segment:
    """A run of frames with the same active labels: ``start``/``end`` in seconds."""

    start: float
    end: float
    labels: tuple[str, ...]


def segments(probabilities: np.ndarray, names: list[str], hop_s: float) -> list[Segment]:
    """The runs of ``probabilities [frames, labels]`` whose active labels (> 0.5) are the same;
    frames with none active are left out."""
    active = probabilities > ACTIVE
    out, start = [], 0
    for i in range(1, len(active) + 1):
        if i < len(active) and np.array_equal(active[i], active[start]):
            continue
        labels = tuple(name for name, on in zip(names, active[start], strict=True) if on)
        if labels:
            out.append(Segment(round(start * hop_s, 6), round(i * hop_s, 6), labels))
        start = i
    return out


#: Each head's command, for a package given to the wrong one.
_COMMANDS = {
    "ctc": "generate",
    "sequence-classification": "classify",
    "audio-frame-classification": "classify",
    "xvector": "speaker",
}


class _HeadRunner(AudioEncoder):
    def wrong_head(self, found: str) -> str:
        if found in _COMMANDS:
            return (
                f"{self.package_dir} has a {found} head, not {self.head}: run it with "
                f"'mobius {_COMMANDS[found]} {self.package_dir} AUDIO'"
            )
        return super().wrong_head(found)


class FrameClassifier(_HeadRunner):
    """A ``*ForAudioFrameClassification`` package: per-frame label probabilities and segments."""

    head = "audio-frame-classification"

    @property
    def hop_s(self) -> float:
        """Seconds between frames: the conv strides over the samples, or stacked 10 ms fbank frames."""
        if self.source == "input_features":
            stride = getattr(self.feature_extractor, "stride", 1)
            return FBANK_SHIFT_S * (stride if isinstance(stride, int) and stride > 0 else 1)
        strides = self.config.get("conv_stride")
        if not isinstance(strides, list) or not all(
            isinstance(s, int) and 0 < s < 10_000 for s in strides
        ):
            raise PackageError(f"config.json's conv_stride {strides!r} is not a list of strides")
        return math.prod(strides) / self.sampling_rate

    def probabilities(self, audio, sampling_rate: int | None = None) -> np.ndarray:
        """``[frames, num_labels]``: the sigmoid of each frame's logits for one clip."""
        return 1 / (1 + np.exp(-self.logits(audio, sampling_rate)))

    def segments(self, audio, sampling_rate: int | None = None) -> list[Segment]:
        """The clip's segments of active labels (see :func:`segments`)."""
        probabilities = self.probabilities(audio, sampling_rate)
        names = label_names(self.config, probabilities.shape[-1])
        return segments(probabilities, names, self.hop_s)


class SpeakerEmbedder(_HeadRunner):
    """A ``*ForXVector`` package: the speaker embedding of a clip."""

    head = "xvector"

    def embedding(self, audio, sampling_rate: int | None = None) -> np.ndarray:
        """``[xvector_output_dim]`` float32: the ``embeddings`` output for one clip."""
        return self.output("embeddings", audio, sampling_rate)


def cosine_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """The cosine of the angle between two vectors (transformers' example normalises, then compares)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-12))


def classify_frames(
    package_dir: str | os.PathLike,
    audio,
    *,
    sampling_rate: int | None = None,
    threads: int | None = None,
) -> list[Segment]:
    """The segments of active labels in ``audio`` (a file, or mono samples at ``sampling_rate``
    Hz) by a ``*ForAudioFrameClassification`` package (speaker diarization...)."""
    return FrameClassifier(package_dir, threads=threads).segments(audio, sampling_rate)


def speaker_embedding(
    package_dir: str | os.PathLike,
    audio,
    *,
    sampling_rate: int | None = None,
    threads: int | None = None,
) -> np.ndarray:
    """The x-vector of ``audio`` (a file, or mono samples at ``sampling_rate`` Hz) by a
    ``*ForXVector`` package: compare two with :func:`cosine_similarity`."""
    return SpeakerEmbedder(package_dir, threads=threads).embedding(audio, sampling_rate)


def _package_head(package_dir) -> str | None:
    """The head of an audio-encoder package, or None for any other package."""
    if not is_audio_encoder_package(package_dir):
        return None
    import json

    model = read_graph(Path(package_dir) / "model.onnx")
    ranks = {o.name: len(o.type.tensor_type.shape.dim) for o in model.graph.output}
    try:
        config = json.loads((Path(package_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}  # the runner that accepts it says what is wrong
    return graph_head(ranks, config.get("architectures") if isinstance(config, dict) else None)


def is_frame_classifier_package(package_dir) -> bool:
    """Whether the package is an audio encoder with a frame-classification head."""
    return _package_head(package_dir) == "audio-frame-classification"


def is_speaker_package(package_dir) -> bool:
    """Whether the package is an audio encoder ``mobius speaker`` runs (it refuses other heads)."""
    return _package_head(package_dir) is not None


def run_classify_cli(package_dir, inputs: list[str], options: dict) -> int:
    """``mobius classify`` of a frame classifier: one ``path [start -> end] labels`` line a segment."""
    if options.get("labels") is not None:
        raise MobiusError(
            f"--labels applies to zero-shot packages; {package_dir} classifies frames into "
            "the labels it was trained on"
        )
    classifier = FrameClassifier(package_dir, threads=options.get("threads"))
    for path in inputs:
        found = classifier.segments(path)
        for s in found:
            print(f"{path} [{s.start:.2f} -> {s.end:.2f}] {', '.join(s.labels)}")
        if not found:
            print(f"{path}: no label above {ACTIVE}")
    return 0


def run_speaker_cli(package_dir, inputs: list[str], options: dict) -> int:
    """``mobius speaker``: each clip's cosine similarity to the first; ``--output`` the embeddings."""
    save_to = options.get("speaker_output")
    if len(inputs) < 2 and not save_to:
        raise MobiusError("give two or more audio files to compare, or --output FILE.npy")
    embedder = SpeakerEmbedder(package_dir, threads=options.get("threads"))
    vectors = np.stack([embedder.embedding(path) for path in inputs])
    for path, vector in zip(inputs[1:], vectors[1:], strict=True):
        print(
            f"{path}: {cosine_similarity(vectors[0], vector):.6f} (cosine similarity to {inputs[0]})"
        )
    if save_to:
        try:
            np.save(save_to, vectors)
        except OSError as exc:
            raise MobiusError(f"cannot write {save_to}: {exc.strerror or exc}") from None
        print(f"wrote {save_to} {list(vectors.shape)}")
    return 0
