"""Find objects named by free text in images with a built zero-shot detection package.

The package (:mod:`mobius_vision.tasks.zero_shot_detection`: ``text/model.onnx`` embeds
the query texts once, ``image/model.onnx`` scores every patch of an image against them and
predicts its box) runs in ONNX Runtime. The queries go through the package's
``tokenizer.json`` (the tokenizers library), the pixels and boxes through
:mod:`mobius_vision.processing.owl` (OWL-ViT's and OWLv2's image processors in numpy); the boxes are listed as transformers'
``pipeline("zero-shot-object-detection")`` lists them: each label scored alone (a
sigmoid), every box above the threshold, best first. ``mobius detect --labels`` prints
them as ``mobius detect`` prints an object detector's, and draws them with ``--output``.
A package of the grounded form (Grounding DINO) goes to
:mod:`mobius_vision.grounded_detection_runner`.

Example::

    from mobius_vision.zero_shot_detection_runner import ZeroShotDetector

    detector = ZeroShotDetector("owlvit-out/")
    for found in detector.detect("street.jpg", ["a cat", "a remote"], threshold=0.1):
        print(found.label, found.score, found.box)

Needs ONNX Runtime, Pillow (and scipy for OWLv2): ``pip install mobius-vision[run]``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mobius.classification import open_session
from mobius.errors import MobiusError
from mobius.generate import ORT_FLOAT_TYPES, PackageError
from mobius_vision import grounded_detection_runner as grounded
from mobius_vision.classifier import parse_labels
from mobius_vision.detection_runner import checked_run, pixels_of, report
from mobius_vision.processing._image import image_size
from mobius_vision.processing._settings import read_settings
from mobius_vision.processing.detection import Detection
from mobius_vision.processing.owl import owl_processor, query_detections

#: transformers' zero-shot-object-detection pipeline's default threshold.
DEFAULT_THRESHOLD = 0.1


def is_zero_shot_detection_package(package_dir: str | os.PathLike) -> bool:
    """Whether the package has the contract's two graphs (``text/`` and ``image/``)."""
    package = Path(package_dir)
    return all((package / graph / "model.onnx").is_file() for graph in ("text", "image"))


class ZeroShotDetector:
    """A zero-shot object-detection package in ONNX Runtime, with its text and image
    processing."""

    def __init__(self, package_dir: str | os.PathLike, *, threads: int | None = None) -> None:
        self.package_dir = Path(package_dir)
        if not is_zero_shot_detection_package(self.package_dir):
            raise PackageError(
                f"{self.package_dir} is not a zero-shot object-detection package (it has no "
                "text/model.onnx and image/model.onnx)"
            )
        self.text = open_session(self.package_dir / "text" / "model.onnx", threads)
        self.image = open_session(self.package_dir / "image" / "model.onnx", threads)
        pixels = next((i for i in self.image.get_inputs() if i.name == "pixel_values"), None)
        self.pixel_type = None if pixels is None else ORT_FLOAT_TYPES.get(pixels.type)
        if self.pixel_type is None:
            raise PackageError(
                f"{self.package_dir} must take float32 or float16 pixel_values (build it with "
                "--dtype f32 or f16)"
            )
        settings = read_settings(self.package_dir)
        if not settings.image:
            raise PackageError(
                f"no image processor settings in {self.package_dir} (preprocessor_config.json "
                "or processor_config.json): build from a checkpoint that has its processor"
            )
        self.processor = owl_processor(settings.image)
        self.config = settings.config
        self._tokenizer = None

    @property
    def tokenizer(self):
        """The package's ``tokenizer.json`` (the tokenizers library), unpadded and untruncated
        (transformers' pipeline tokenises each label alone, whole), loaded on first use."""
        if self._tokenizer is None:
            from tokenizers import Tokenizer

            path = self.package_dir / "tokenizer.json"
            try:
                tokenizer = Tokenizer.from_file(str(path))
            except Exception as exc:  # missing or malformed: the library's own reason
                reason = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                raise PackageError(f"cannot load the tokenizer {path}: {reason}") from None
            tokenizer.no_padding()
            tokenizer.no_truncation()
            self._tokenizer = tokenizer
        return self._tokenizer

    def embed_labels(self, labels: Sequence[str]) -> np.ndarray:
        """``text_embeds [labels, dim]``: each label tokenised alone, as transformers'
        pipeline does (no padding to depend on), through the text graph."""
        if not labels:
            raise MobiusError(
                'give the texts to look for with --labels, e.g. --labels "a cat,a dog"'
            )
        limit = (self.config.get("text_config") or {}).get("max_position_embeddings")
        rows = []
        for label in labels:
            input_ids = np.asarray([self.tokenizer.encode(label).ids], np.int64)
            if isinstance(limit, int) and input_ids.shape[1] > limit:
                raise MobiusError(
                    f"the label {label!r} is {input_ids.shape[1]} tokens; the text tower of "
                    f"{self.package_dir} reads at most {limit}"
                )
            feeds = {"input_ids": input_ids, "attention_mask": np.ones_like(input_ids)}
            rows.append(self.text.run(["text_embeds"], feeds)[0])
        return np.concatenate(rows, axis=0)

    def raw_outputs(self, image, text_embeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(logits [patches, labels], pred_boxes [patches, 4])`` of one ``[3, h, w]`` image."""
        pixels = self.processor(image)[None].astype(self.pixel_type)
        feeds = {"pixel_values": pixels, "text_embeds": text_embeds.astype(self.pixel_type)}
        logits, boxes = self.image.run(["logits", "pred_boxes"], feeds)
        return logits[0].astype(np.float32), boxes[0].astype(np.float32)

    def detect(
        self, image, labels: Sequence[str], threshold: float = DEFAULT_THRESHOLD
    ) -> list[Detection]:
        """The boxes of ``labels`` in ``image`` (a path, PIL image or uint8 array) scoring
        above ``threshold``, in the image's pixels, best first."""
        return self.detect_embedded(image, labels, self.embed_labels(labels), threshold)

    def detect_embedded(self, image, labels, text_embeds, threshold: float) -> list[Detection]:
        """:meth:`detect` with the labels already embedded (:meth:`embed_labels`)."""
        image = pixels_of(image)
        logits, boxes = self.raw_outputs(image, text_embeds)
        scale = self.processor.box_scale(image_size(image))
        return query_detections(logits, boxes, scale, threshold, list(labels))


def run_cli(package_dir: str | os.PathLike, inputs: list[str], options: dict) -> int:
    """``mobius detect --labels`` on a zero-shot package: ``IMAGE: label score x0 y0 x1 y1``
    per box, best first."""
    labels = parse_labels(options.get("labels"))
    if labels is None:
        raise MobiusError(
            f"{package_dir} is a zero-shot detector: give the texts to look for with --labels, "
            'e.g. --labels "a cat,a remote"'
        )
    threshold = options.get("threshold")
    threshold = DEFAULT_THRESHOLD if threshold is None else threshold
    output = checked_run(inputs, options, threshold)
    if grounded.is_grounded_package(package_dir):  # Grounding DINO: one prompt of phrases
        return grounded.run_cli(package_dir, inputs, options, labels, threshold, output)
    detector = ZeroShotDetector(package_dir, threads=options.get("threads"))
    text_embeds = detector.embed_labels(labels)  # once for every image
    for path in inputs:
        found = detector.detect_embedded(path, labels, text_embeds, threshold)
        report(path, found, threshold, output)
    return 0
