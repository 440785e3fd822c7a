"""Find the objects a text prompt names with a built Grounding DINO package (the grounded form of
:mod:`mobius_vision.tasks.zero_shot_detection`), without torch.

As transformers' ``GroundingDinoProcessor`` does: the labels become one prompt ("a cat. a
remote."; each label stripped and lowercased), tokenised by the package's tokenizer; the
image is processed as DETR's processor does (:class:`~.processing.detection.DetectionProcessor`:
shortest/longest-edge resize, rescale, normalise, a ``pixel_mask`` of ones). The text graph
runs once per prompt, the image graph once per image. The boxes are read as
``post_process_grounded_object_detection`` reads them: a query is kept where its best
token's sigmoid passes ``threshold``; its label is the tokens whose sigmoid passes
``text_threshold`` (the first and last columns never), decoded. ``mobius detect --labels``
prints them best first, as it prints every detector's.

Example::

    from mobius_vision.grounded_detection_runner import GroundedDetector

    detector = GroundedDetector("grounding-dino-out/")
    for found in detector.detect("street.jpg", ["a cat", "a remote"], 0.35, 0.25):
        print(found.label, found.score, found.box)
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mobius.classification import open_session
from mobius.errors import MobiusError
from mobius.generate import ORT_FLOAT_TYPES, PackageError
from mobius_vision.classifier import graph_io
from mobius_vision.detection_runner import pixels_of, report
from mobius_vision.processing._image import image_size
from mobius_vision.processing._settings import load_tokenizer, read_settings
from mobius_vision.processing.detection import (
    Detection,
    DetectionProcessor,
    corners,
    processor_name,
)

#: ``post_process_grounded_object_detection``'s default text threshold.
DEFAULT_TEXT_THRESHOLD = 0.25
#: The image processors whose pixels the grounded detectors take (DETR's rules).
GROUNDED_PROCESSORS = ("GroundingDinoImageProcessor",)


def is_grounded_package(package_dir: str | os.PathLike) -> bool:
    """Whether a zero-shot detection package is of the grounded form (its text graph gives
    ``text_features``)."""
    io = graph_io(Path(package_dir) / "text")
    return io is not None and "text_features" in io[1]


def prompt_of(labels: Sequence[str]) -> str:
    """transformers' merged prompt: ``"a cat. a remote."`` (labels stripped, lowercased)."""
    if not labels:
        raise MobiusError('give the texts to look for with --labels, e.g. --labels "a cat,a dog"')
    for label in labels:
        if "." in label or not label.strip():
            raise MobiusError(
                f"the label {label!r} is empty or holds a '.', which ends Grounding DINO's phrases"
            )
    return ". ".join(label.strip().lower() for label in labels) + "."


def sigmoid(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))`` (``-inf`` gives 0, quietly)."""
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x.astype(np.float32)))


class GroundedDetector:
    """A grounded zero-shot detection package in ONNX Runtime, with its processing."""

    def __init__(self, package_dir: str | os.PathLike, *, threads: int | None = None) -> None:
        self.package_dir = Path(package_dir)
        if not is_grounded_package(self.package_dir):
            raise PackageError(
                f"{self.package_dir} is not a grounded zero-shot detection package (its "
                "text/model.onnx gives no text_features)"
            )
        self.text = open_session(self.package_dir / "text" / "model.onnx", threads)
        self.image = open_session(self.package_dir / "image" / "model.onnx", threads)
        pixels = next((i for i in self.image.get_inputs() if i.name == "pixel_values"), None)
        self.pixel_type = None if pixels is None else ORT_FLOAT_TYPES.get(pixels.type)
        if self.pixel_type is None:
            raise PackageError(f"{self.package_dir} must take float32 or float16 pixel_values")
        settings = read_settings(self.package_dir)
        name = processor_name(settings.image) if settings.image else None
        if name not in GROUNDED_PROCESSORS:
            raise PackageError(
                f"{self.package_dir} has no {GROUNDED_PROCESSORS[0]} settings "
                "(preprocessor_config.json or processor_config.json): build from a checkpoint "
                "that has its processor"
            )
        self.processor = DetectionProcessor.from_dict(settings.image)
        limit = settings.config.get("max_text_len")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise PackageError(f"config.json of {self.package_dir} has no max_text_len")
        self.max_text_len = limit
        self.tokenizer = load_tokenizer(self.package_dir)

    def encode(self, labels: Sequence[str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """``(input_ids [1, n], the image graph's text inputs)`` of the labels' prompt."""
        input_ids = np.asarray([self.tokenizer(prompt_of(labels))["input_ids"]], np.int64)
        if input_ids.shape[1] > self.max_text_len:
            raise MobiusError(
                f"the labels make a prompt of {input_ids.shape[1]} tokens; the model reads at "
                f"most {self.max_text_len}"
            )
        feeds = {"input_ids": input_ids, "attention_mask": np.ones_like(input_ids)}
        names = [o.name for o in self.text.get_outputs()]
        text = dict(zip(names, self.text.run(None, feeds), strict=True))
        text["text_features"] = text["text_features"].astype(self.pixel_type)
        return input_ids, {**text, "attention_mask": feeds["attention_mask"]}

    def raw_outputs(self, image, text: dict) -> tuple[np.ndarray, np.ndarray]:
        """``(logits [queries, max_text_len], pred_boxes [queries, 4])`` of one image."""
        pixels, mask = self.processor(image)
        feeds = {"pixel_values": pixels[None].astype(self.pixel_type), "pixel_mask": mask[None]}
        logits, boxes = self.image.run(["logits", "pred_boxes"], {**feeds, **text})
        return logits[0].astype(np.float32), boxes[0].astype(np.float32)

    def detect(
        self,
        image,
        labels: Sequence[str],
        threshold: float,
        text_threshold: float = DEFAULT_TEXT_THRESHOLD,
    ) -> list[Detection]:
        """The boxes in ``image`` (a path, PIL image or uint8 array) of what ``labels`` name,
        in the image's pixels, best first."""
        input_ids, text = self.encode(labels)
        return self.detect_encoded(image, input_ids[0], text, threshold, text_threshold)

    def detect_encoded(self, image, input_ids, text, threshold, text_threshold) -> list[Detection]:
        """:meth:`detect` with the prompt already encoded (:meth:`encode`)."""
        image = pixels_of(image)
        logits, boxes = self.raw_outputs(image, text)
        probs = sigmoid(logits)
        scores = probs.max(axis=-1)
        pixel_boxes = corners(boxes, image_size(image))
        found = []
        for query in np.flatnonzero(scores > threshold):
            tokens = probs[query] > text_threshold
            tokens[0] = tokens[-1] = False  # as transformers' get_phrases_from_posmap
            ids = [int(input_ids[i]) for i in np.flatnonzero(tokens) if i < len(input_ids)]
            box = tuple(map(float, pixel_boxes[query]))
            found.append(Detection(self.tokenizer.decode(ids), float(scores[query]), box))
        return sorted(found, key=lambda d: d.score, reverse=True)  # stable: ties keep their order


def run_cli(package_dir, inputs: list[str], options: dict, labels, threshold, output) -> int:
    """``mobius detect --labels`` on a grounded package (checked by the zero-shot runner):
    ``IMAGE: label score x0 y0 x1 y1`` per box, best first."""
    text_threshold = options.get("text_threshold")
    text_threshold = DEFAULT_TEXT_THRESHOLD if text_threshold is None else text_threshold
    finite = isinstance(text_threshold, float) and math.isfinite(text_threshold)
    if not (finite and 0 <= text_threshold <= 1):
        raise MobiusError(f"--text-threshold must be a number in [0, 1], not {text_threshold}")
    detector = GroundedDetector(package_dir, threads=options.get("threads"))
    input_ids, text = detector.encode(labels)  # once for every image
    for path in inputs:
        found = detector.detect_encoded(path, input_ids[0], text, threshold, text_threshold)
        report(path, found, threshold, output)
    return 0
