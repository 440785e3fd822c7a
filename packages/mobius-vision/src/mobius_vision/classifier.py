"""Classify images with a built package, as transformers' image-classification pipelines do.

Two kinds of package (:mod:`mobius_vision.tasks`):

- an **image classifier** (``pixel_values`` -> ``logits``): its labels are
  ``config.json``'s ``id2label``; the scores are the softmax of the logits (a sigmoid
  for one label or ``problem_type`` multi-label, the logits themselves for
  regression), as transformers' ``image-classification`` pipeline scores them;
- a **zero-shot** dual encoder (CLIP, SigLIP): the candidate labels go through the
  package's tokenizer as ``"This is a photo of {label}."``; CLIP's scores are the
  softmax of ``logits_per_image`` over the labels, SigLIP's (texts padded to 64
  tokens) the sigmoid of each, as transformers' ``zero-shot-image-classification``
  pipeline scores them.

The pixels come from :mod:`mobius_vision.processing.classification` (the package's
``preprocessor_config.json``). Named ``classifier`` so that the module does not
shadow the :func:`mobius_vision.classify` function once imported.

Example::

    import mobius_vision

    mobius_vision.classify("vit-out/", ["cat.png"], top=3)  # [[("tabby", 0.81), ...]]
    mobius_vision.classify("clip-out/", ["cat.png"], labels=["a cat", "a dog"])

Needs ONNX Runtime and Pillow: ``pip install mobius-vision[run]``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mobius.classification import format_line, label_names, open_session, ranked, softmax
from mobius.errors import MobiusError
from mobius.generate import ORT_FLOAT_TYPES, PackageError, _read_json, read_graph
from mobius_vision.processing._settings import load_tokenizer
from mobius_vision.processing.classification import load_image_processor

#: transformers' zero-shot pipeline's hypothesis template.
HYPOTHESIS_TEMPLATE = "This is a photo of {}."
#: The fixed text length SigLIP was trained with; transformers' pipeline pads to it.
SIGLIP_TEXT_LENGTH = 64
_PROBLEM_TYPES = (None, "regression", "single_label_classification", "multi_label_classification")


def graph_io(package_dir: str | os.PathLike) -> tuple[list[str], list[str]] | None:
    """The input and output names of the package's ``model.onnx``, or None without one."""
    graph = Path(package_dir) / "model.onnx"
    if not graph.is_file():
        return None

    model = read_graph(graph)  # PackageError if not ONNX
    return [i.name for i in model.graph.input], [o.name for o in model.graph.output]


def is_image_package(package_dir: str | os.PathLike) -> bool:
    """Whether the package is an image encoder (``pixel_values`` alone, classifier or not) or
    a zero-shot dual encoder (``logits_per_image``): what ``mobius classify`` runs here."""
    io = graph_io(package_dir)
    if io is None:
        return False
    inputs, outputs = io
    return inputs == ["pixel_values"] or (
        "pixel_values" in inputs and "logits_per_image" in outputs
    )


class ImageClassifier:
    """An image-classification package in ONNX Runtime, with its image processor."""

    def __init__(self, package_dir: str | os.PathLike, *, threads: int | None = None) -> None:
        self.package_dir = Path(package_dir)
        self.session = open_session(self.package_dir / "model.onnx", threads)
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        self.outputs = [o.name for o in self.session.get_outputs()]
        self.config = _read_json(self.package_dir / "config.json")
        self._check_outputs()
        pixels = self.inputs.get("pixel_values")
        if pixels is None:
            raise PackageError(f"{self.package_dir}'s graph takes no pixel_values")
        self.pixel_type = ORT_FLOAT_TYPES.get(pixels.type)
        if self.pixel_type is None:
            raise PackageError(
                f"{self.package_dir} takes {pixels.type} pixels; ONNX Runtime's Python API "
                "feeds float32 and float16 only (build with --dtype f32 or f16)"
            )
        self.pixel_shape = tuple(pixels.shape[1:])  # channels, height, width: fixed by the build
        self.processor = load_image_processor(self.package_dir)

    def _check_outputs(self) -> None:
        if "logits" not in self.outputs:
            raise MobiusError(
                f"{self.package_dir} has no classification head (outputs: "
                f"{', '.join(self.outputs)}): build it with --head image-classification"
            )

    def pixels(self, image) -> np.ndarray:
        """``pixel_values`` ``[1, 3, height, width]`` of one image (a path, PIL image or array)."""
        pixels = self.processor(image)
        if pixels.shape != self.pixel_shape:
            raise PackageError(
                f"the image processor of {self.package_dir} makes {list(pixels.shape)} pixels; "
                f"its graph takes {list(self.pixel_shape)}"
            )
        return pixels[None].astype(self.pixel_type)

    def check_labels(self, labels: Sequence[str] | None) -> None:
        """Refuse candidate labels: a classifier has its own."""
        if labels is not None:
            raise MobiusError(
                f"--labels applies to zero-shot packages (CLIP, SigLIP); {self.package_dir} "
                "classifies into the labels it was trained on"
            )

    def scores(self, image, labels: Sequence[str] | None = None) -> list[tuple[str, float]]:
        """Every label with its score for ``image``, in label order (``labels``: a zero-shot
        package's candidates)."""
        self.check_labels(labels)
        (logits,) = self.session.run(["logits"], {"pixel_values": self.pixels(image)})
        logits = np.asarray(logits[0], np.float32)
        names = label_names(self.config, logits.shape[-1])
        return list(zip(names, classification_scores(logits, self.config), strict=True))

    def classify(
        self, images: Sequence, *, labels: Sequence[str] | None = None, top: int = 5
    ) -> list[list[tuple[str, float]]]:
        """The ``top`` likeliest ``(label, score)`` of each image, likeliest first."""
        return [ranked(self.scores(image, labels), top) for image in images]


class ZeroShotImageClassifier(ImageClassifier):
    """A zero-shot dual encoder (CLIP): the image against ``labels``, softmax over them."""

    _tokenizer = None

    def _check_outputs(self) -> None:
        if "logits_per_image" not in self.outputs:
            raise PackageError(f"{self.package_dir} has no logits_per_image output")

    def check_labels(self, labels: Sequence[str] | None) -> None:
        """Refuse a call without candidate labels."""
        if not labels:
            raise MobiusError(
                f"{self.package_dir} is a zero-shot classifier: give the candidate labels "
                "with --labels a,b,c"
            )

    @property
    def tokenizer(self):
        """The package's tokenizer (``transformers.AutoTokenizer``), loaded on first use."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.package_dir)
        return self._tokenizer

    def tokenizer_options(self) -> dict:
        """How the label texts are padded (transformers' pipeline: to the longest)."""
        return dict(padding=True)

    def text_feeds(self, labels: Sequence[str]) -> dict[str, np.ndarray]:
        """``input_ids`` (and ``attention_mask`` where the graph takes one) of the label texts."""
        texts = [HYPOTHESIS_TEMPLATE.format(label) for label in labels]
        batch = self.tokenizer(texts, **self.tokenizer_options())
        input_ids = np.asarray(batch["input_ids"], np.int64)
        limit = (self.config.get("text_config") or {}).get("max_position_embeddings")
        if isinstance(limit, int) and input_ids.shape[1] > limit:
            raise MobiusError(
                f"a label text is {input_ids.shape[1]} tokens; the text tower of "
                f"{self.package_dir} reads at most {limit}"
            )
        feeds = {"input_ids": input_ids}
        if "attention_mask" in self.inputs:
            mask = batch.get("attention_mask")
            feeds["attention_mask"] = (
                np.ones_like(input_ids) if mask is None else np.asarray(mask, np.int64)
            )
        return feeds

    def scores(self, image, labels: Sequence[str] | None = None) -> list[tuple[str, float]]:
        self.check_labels(labels)
        feeds = {**self.text_feeds(labels), "pixel_values": self.pixels(image)}
        (logits,) = self.session.run(["logits_per_image"], feeds)
        return list(zip(labels, self.probabilities(np.asarray(logits[0], np.float32)), strict=True))

    def probabilities(self, logits: np.ndarray) -> list[float]:
        """The labels' scores: a softmax over them."""
        return softmax(logits).tolist()


class SigmoidZeroShotImageClassifier(ZeroShotImageClassifier):
    """SigLIP: texts padded to its fixed length; each label scored alone by a sigmoid."""

    def tokenizer_options(self) -> dict:
        return dict(padding="max_length", max_length=SIGLIP_TEXT_LENGTH, truncation=True)

    def probabilities(self, logits: np.ndarray) -> list[float]:
        return (1 / (1 + np.exp(-logits))).tolist()


def open_image_classifier(package_dir: str | os.PathLike, **options) -> ImageClassifier:
    """The classifier a package's graph and config call for (see the module docstring)."""
    io = graph_io(package_dir)
    if io is None:
        raise PackageError(f"no model.onnx in {package_dir}: not a package built by mobius")
    if "logits_per_image" not in io[1]:
        return ImageClassifier(package_dir, **options)
    model_type = _read_json(Path(package_dir) / "config.json").get("model_type")
    # transformers' pipeline tells SigLIP (and SigLIP 2) apart by its model_type.
    if isinstance(model_type, str) and "siglip" in model_type:
        return SigmoidZeroShotImageClassifier(package_dir, **options)
    return ZeroShotImageClassifier(package_dir, **options)


def classify(
    package_dir: str | os.PathLike,
    images,
    labels: Sequence[str] | None = None,
    top: int = 5,
    *,
    threads: int | None = None,
) -> list[list[tuple[str, float]]]:
    """The ``top`` likeliest ``(label, score)`` pairs of each image, likeliest first.

    ``images``: a path, PIL image or ``[h, w, 3]`` uint8 array, or a list of them.
    ``labels``: the candidate labels of a zero-shot package (required there, refused
    by a classifier, which has its own).
    """
    if isinstance(images, (str, os.PathLike, np.ndarray)) or hasattr(images, "getbands"):
        images = [images]
    if top < 1:
        raise MobiusError(f"top must be at least 1, not {top}")
    classifier = open_image_classifier(package_dir, threads=threads)
    return classifier.classify(list(images), labels=labels, top=top)


def run_cli(package_dir: str | os.PathLike, inputs: list[str], options: dict) -> int:
    """mobius-vision's ``mobius classify`` runner: a line of top labels per image."""
    labels = parse_labels(options.get("labels"))
    for path in inputs:
        if not Path(path).is_file():
            raise MobiusError(f"no image file at {path}")
    classifier = open_image_classifier(package_dir, threads=options.get("threads"))
    classifier.check_labels(labels)  # before any image is read
    for path in inputs:
        print(format_line(path, ranked(classifier.scores(path, labels), options["top"])))
    return 0


def parse_labels(value: str | None) -> list[str] | None:
    """``--labels a,b,c`` as a list (blank entries dropped); None when not given."""
    if value is None:
        return None
    labels = [label.strip() for label in value.split(",") if label.strip()]
    if not labels:
        raise MobiusError("--labels names no label: give them comma-separated, --labels cat,dog")
    return labels


def classification_scores(logits: np.ndarray, config: dict) -> list[float]:
    """Scores of one row of logits, by transformers' image-classification pipeline's rule:
    the logits for regression, a sigmoid for multi-label or a single label, else a softmax."""
    problem = config.get("problem_type")
    if problem not in _PROBLEM_TYPES:
        raise PackageError(f"config.json's problem_type {problem!r} is not one transformers knows")
    if problem == "regression":
        return logits.tolist()
    if problem == "multi_label_classification" or logits.shape[-1] == 1:
        return (1 / (1 + np.exp(-logits))).tolist()
    return softmax(logits).tolist()
