"""Run an audio-encoder package with a head: CTC transcription and audio classification.

An ``audio-feature-extraction`` package (:mod:`mobius_audio.tasks`) built from a
``*ForCTC`` checkpoint gives per-frame ``logits [batch, frames, vocab]``; one built
from a ``*ForSequenceClassification`` checkpoint gives ``logits [batch, num_labels]``.
The audio file is decoded and resampled by :func:`mobius_audio.audio_file.read_audio`
and goes through the package's own feature extractor (``preprocessor_config.json``:
``Wav2Vec2FeatureExtractor`` normalises each clip to zero mean and unit variance when
``do_normalize``) on its numpy path, as transformers' pipelines feed it (an extractor
whose transformers class needs torch, Parakeet's, is made in numpy:
:data:`NUMPY_EXTRACTORS`):

- **CTC** (:func:`transcribe_ctc`, ``mobius generate PKG speech.wav``): the likeliest
  token of each frame, decoded by the package's CTC tokenizer as transformers'
  ``automatic-speech-recognition`` pipeline decodes it (repeats collapsed, the pad
  token dropped as the CTC blank, the word delimiter made a space);
- **classification** (:func:`classify_audio`, ``mobius classify PKG speech.wav``): the
  labels of ``config.json``'s ``id2label`` with the softmax of the logits (a sigmoid
  for ``problem_type`` multi-label, the logits for regression), as transformers'
  ``audio-classification`` pipeline scores them.

Example::

    import mobius_audio

    print(mobius_audio.transcribe_ctc("wav2vec2-out/", "speech.flac"))
    mobius_audio.classify_audio("audio-classifier-out/", "speech.wav", top=3)

Needs ONNX Runtime and soundfile: ``pip install mobius-audio[run]``.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import numpy as np

from mobius.classification import format_line, label_names, open_session, ranked, softmax
from mobius.errors import MobiusError
from mobius.generate import (
    ORT_FLOAT_TYPES,
    PackageError,
    _read_json,
    _refuse_plugin_options,
    load_tokenizer,
    read_graph,
    refuse_output_file,
)
from mobius_audio.audio_file import read_audio, resample
from mobius_audio.generate import extract_inputs
from mobius_audio.heads import graph_head

#: The audio inputs of the audio-feature-extraction contract, besides ``attention_mask``.
SOURCES = ("input_values", "input_features")
_PROBLEM_TYPES = (None, "regression", "single_label_classification", "multi_label_classification")
#: The heads other commands run: head -> (what the package does, the command).
OTHER_RUNNERS = {
    "audio-frame-classification": ("classifies frames (diarization)", "classify"),
    "xvector": ("embeds speakers (an x-vector head)", "speaker"),
}


#: Feature extractors whose transformers class needs torch, made in numpy here:
#: ``feature_extractor_type`` -> ``"module:Class"`` with ``from_dict(preprocessor_config)``.
NUMPY_EXTRACTORS = {
    "ParakeetFeatureExtractor": "mobius_audio.parakeet_features:ParakeetFeatureExtractor",
    "ASTFeatureExtractor": "mobius_audio.ast_features:ASTFeatures",
}
#: CTC tokenizers (besides Wav2Vec2CTCTokenizer) whose decode collapses repeats and drops the blank.
GROUPING_TOKENIZERS = ("ParakeetTokenizer",)


def numpy_feature_extractor(package_dir: Path):
    """The package's extractor from :data:`NUMPY_EXTRACTORS`, or None for one transformers runs."""
    values = _read_json(package_dir / "preprocessor_config.json")
    kind = values.get("feature_extractor_type")
    target = NUMPY_EXTRACTORS.get(kind) if isinstance(kind, str) else None
    if target is None:
        return None
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name).from_dict(values)


def is_audio_encoder_package(package_dir: str | os.PathLike) -> bool:
    """Whether the package's ``model.onnx`` is an audio encoder's: audio (and ``attention_mask``) in."""
    graph = Path(package_dir) / "model.onnx"
    if not graph.is_file():
        return False

    model = read_graph(graph)  # PackageError if not ONNX
    inputs = [i.name for i in model.graph.input]
    # AST's fixed window of fbank frames has no mask
    return bool(inputs) and inputs[0] in SOURCES and inputs[1:] in (["attention_mask"], [])


class AudioEncoder:
    """An audio-encoder package in ONNX Runtime with its feature extractor: the head's logits."""

    #: The head this runner needs (``ctc`` or ``sequence-classification``), for its refusals.
    head = ""

    _feature_extractor = None

    def __init__(self, package_dir: str | os.PathLike, *, threads: int | None = None) -> None:
        self.package_dir = Path(package_dir)
        self.session = open_session(self.package_dir / "model.onnx", threads)
        inputs = self.session.get_inputs()
        self.source = inputs[0].name
        self.source_type = ORT_FLOAT_TYPES.get(inputs[0].type)
        if self.source not in SOURCES or self.source_type is None:
            raise PackageError(
                f"{self.package_dir} is not an audio encoder with float32 or float16 input: "
                f"its graph takes {[(i.name, i.type) for i in inputs]}"
            )
        self.config = _read_json(self.package_dir / "config.json")
        ranks = {o.name: len(o.shape) for o in self.session.get_outputs()}
        found = graph_head(ranks, self.config.get("architectures"))
        if found != self.head:
            raise MobiusError(self.wrong_head(found))

    def wrong_head(self, found: str) -> str:
        """What the user is told when the package's head is ``found`` instead."""
        if found == "none":
            return f"{self.package_dir} has no head: build a *ForCTC or *ForSequenceClassification checkpoint"
        if found in OTHER_RUNNERS:  # the frame and speaker heads (mobius_audio.speaker_heads)
            what, command = OTHER_RUNNERS[found]
            return f"{self.package_dir} {what}: run it with 'mobius {command} {self.package_dir} AUDIO'"
        return f"{self.package_dir}'s logits are not those of a {self.head} head"

    @property
    def feature_extractor(self):
        """The package's feature extractor (``preprocessor_config.json``), loaded on first use."""
        if self._feature_extractor is None:
            if not (self.package_dir / "preprocessor_config.json").is_file():
                raise PackageError(
                    f"no preprocessor_config.json in {self.package_dir}: build from a "
                    "checkpoint that has its feature extractor"
                )
            numpy_extractor = numpy_feature_extractor(self.package_dir)
            if numpy_extractor is not None:
                self._feature_extractor = numpy_extractor
                return numpy_extractor
            from transformers import AutoFeatureExtractor

            try:
                self._feature_extractor = AutoFeatureExtractor.from_pretrained(
                    str(self.package_dir), trust_remote_code=False
                )
            except (OSError, ValueError, TypeError) as exc:
                raise PackageError(
                    f"cannot load the feature extractor of {self.package_dir}: {exc}"
                ) from None
        return self._feature_extractor

    @property
    def sampling_rate(self) -> int:
        rate = getattr(self.feature_extractor, "sampling_rate", None)
        if not isinstance(rate, int) or isinstance(rate, bool) or not 0 < rate <= 1_000_000:
            raise PackageError(f"preprocessor_config.json's sampling_rate {rate!r} is not a rate")
        return rate

    def samples(self, audio, sampling_rate: int | None = None) -> np.ndarray:
        """Mono samples at the extractor's rate: ``audio`` is a file, or samples at ``sampling_rate``."""
        if isinstance(audio, (str, os.PathLike)):
            return read_audio(audio, self.sampling_rate)
        if sampling_rate is None:
            raise MobiusError("give the samples' rate (sampling_rate=...) or an audio file")
        samples = np.asarray(audio, np.float32).reshape(-1)
        return resample(samples, int(sampling_rate), self.sampling_rate)

    def logits(self, audio, sampling_rate: int | None = None) -> np.ndarray:
        """The head's logits of one clip (batch dimension dropped), as float32."""
        return self.output("logits", audio, sampling_rate)

    def output(self, name: str, audio, sampling_rate: int | None = None) -> np.ndarray:
        """The graph output ``name`` for one clip (batch dimension dropped), as float32."""
        samples = self.samples(audio, sampling_rate)
        masked = len(self.session.get_inputs()) > 1  # AST takes its fixed window alone
        feeds = extract_inputs(
            self.feature_extractor, samples, self.sampling_rate, self.source, mask=masked
        )
        feeds[self.source] = feeds[self.source].astype(self.source_type)
        (value,) = self.session.run([name], feeds)
        return np.asarray(value[0], np.float32)


class CTCTranscriber(AudioEncoder):
    """A ``*ForCTC`` package: greedy CTC decoding with the package's tokenizer."""

    head = "ctc"
    _tokenizer = None

    def wrong_head(self, found: str) -> str:
        if found == "sequence-classification":
            return (
                f"{self.package_dir} is an audio classifier: run it with "
                f"'mobius classify {self.package_dir} AUDIO'"
            )
        return super().wrong_head(found)

    @property
    def tokenizer(self):
        """The package's CTC tokenizer (``Wav2Vec2CTCTokenizer``), loaded on first use."""
        if self._tokenizer is None:
            tokenizer = load_tokenizer(self.package_dir)
            ctc = hasattr(tokenizer, "word_delimiter_token") or (
                type(tokenizer).__name__ in GROUPING_TOKENIZERS
            )
            if not ctc:  # it would not collapse repeats
                raise PackageError(
                    f"the tokenizer of {self.package_dir} ({type(tokenizer).__name__}) is not a "
                    "CTC tokenizer (Wav2Vec2CTCTokenizer, ParakeetTokenizer)"
                )
            self._tokenizer = tokenizer
        return self._tokenizer

    def transcribe(self, audio, sampling_rate: int | None = None) -> str:
        """The text of one clip (a file, or samples at ``sampling_rate``)."""
        ids = self.logits(audio, sampling_rate).argmax(axis=-1)
        # Special tokens stay, as transformers' ASR pipeline decodes CTC output.
        return self.tokenizer.decode(ids.tolist(), skip_special_tokens=False)


class AudioClassifier(AudioEncoder):
    """A ``*ForSequenceClassification`` package: scores over ``config.json``'s labels."""

    head = "sequence-classification"

    def wrong_head(self, found: str) -> str:
        if found == "ctc":
            return (
                f"{self.package_dir} transcribes speech (a CTC head): run it with "
                f"'mobius generate {self.package_dir} AUDIO'"
            )
        return super().wrong_head(found)

    def scores(self, audio, sampling_rate: int | None = None) -> list[tuple[str, float]]:
        """Every label with its score for one clip, in label order."""
        logits = self.logits(audio, sampling_rate)
        problem = self.config.get("problem_type")
        if problem not in _PROBLEM_TYPES:
            raise PackageError(
                f"config.json's problem_type {problem!r} is not one transformers knows"
            )
        if problem == "regression":
            scores = logits
        elif problem == "multi_label_classification":
            scores = 1 / (1 + np.exp(-logits))
        else:  # the audio pipeline's softmax, one label included
            scores = softmax(logits)
        names = label_names(self.config, logits.shape[-1])
        return list(zip(names, scores.tolist(), strict=True))


def transcribe_ctc(
    package_dir: str | os.PathLike,
    audio,
    *,
    sampling_rate: int | None = None,
    threads: int | None = None,
) -> str:
    """The transcription of ``audio`` (a file, or mono samples at ``sampling_rate`` Hz) by a
    ``*ForCTC`` package (wav2vec2, HuBERT, WavLM, Parakeet...), greedy as transformers decodes it."""
    return CTCTranscriber(package_dir, threads=threads).transcribe(audio, sampling_rate)


def classify_audio(
    package_dir: str | os.PathLike,
    audio,
    *,
    sampling_rate: int | None = None,
    top: int = 5,
    threads: int | None = None,
) -> list[tuple[str, float]]:
    """The ``top`` likeliest ``(label, score)`` pairs of ``audio`` (a file, or mono samples at
    ``sampling_rate`` Hz) by a ``*ForSequenceClassification`` package, likeliest first."""
    if top < 1:
        raise MobiusError(f"top must be at least 1, not {top}")
    classifier = AudioClassifier(package_dir, threads=threads)
    return ranked(classifier.scores(audio, sampling_rate), top)


def run_generate_cli(package_dir: str | os.PathLike, prompt: str, options: dict) -> int:
    """mobius-audio's ``mobius generate`` runner for CTC packages: print the transcription."""
    _refuse_plugin_options(package_dir, options)  # --language, --task...: Whisper's
    refuse_output_file(package_dir, options)
    sampling = [flag for flag, dest in _SAMPLING_FLAGS.items() if options.get(dest)]
    if sampling:
        raise MobiusError(f"{', '.join(sampling)}: a CTC package transcribes greedily")
    print(CTCTranscriber(package_dir, threads=options.get("threads")).transcribe(prompt))
    return 0


_SAMPLING_FLAGS = {
    "--do-sample": "do_sample",
    "--temperature": "temperature",
    "--top-k": "top_k",
    "--top-p": "top_p",
    "--system": "system",
}


def run_classify_cli(package_dir: str | os.PathLike, inputs: list[str], options: dict) -> int:
    """mobius-audio's ``mobius classify`` runner: a line of top labels per audio file."""
    if options.get("labels") is not None:
        raise MobiusError(
            f"--labels applies to zero-shot image packages; {package_dir} classifies into "
            "the labels it was trained on"
        )
    classifier = AudioClassifier(package_dir, threads=options.get("threads"))
    for path in inputs:
        scores = ranked(classifier.scores(path), options["top"])
        print(format_line(path, scores))
    return 0
