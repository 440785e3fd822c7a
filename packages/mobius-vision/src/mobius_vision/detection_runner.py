"""Find objects in images with a built object-detection package, as transformers' pipeline does.

The package (:mod:`mobius_vision.tasks.object_detection`: ``pixel_values`` [+ ``pixel_mask``]
-> ``logits``, ``pred_boxes``) runs in ONNX Runtime on one image at a time; the pixels and
the boxes go through :mod:`mobius_vision.processing.detection`, which re-implements the
package's image processor (its ``preprocessor_config.json``) and its
``post_process_object_detection`` in numpy. ``mobius detect`` prints one line per box
(label, score, corners ``x0 y0 x1 y1`` in the image's pixels) and, with ``--output``,
draws the boxes on a copy of the image.

Example::

    import mobius_vision.detection_runner as detection

    detector = detection.ObjectDetector("detr-out/")
    for found in detector.detect("street.jpg", threshold=0.9):
        print(found.label, found.score, found.box)

Needs ONNX Runtime and Pillow: ``pip install mobius-vision[run]``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from mobius.classification import label_names, open_session
from mobius.errors import MobiusError
from mobius.generate import ORT_FLOAT_TYPES, PackageError, _read_json
from mobius_vision.classifier import graph_io
from mobius_vision.processing._image import to_chw
from mobius_vision.processing.classification import load_image
from mobius_vision.processing.detection import Detection, detection_processing

#: The inputs of an object-detection graph (:mod:`mobius_vision.tasks.object_detection`).
DETECTION_INPUTS = (["pixel_values"], ["pixel_values", "pixel_mask"])


def is_detection_package(package_dir: str | os.PathLike) -> bool:
    """Whether the package's graph is an object detector: pixels (and their mask) in,
    ``logits`` and ``pred_boxes`` out (a zero-shot detector also takes texts)."""
    io = graph_io(package_dir)
    return io is not None and io[0] in DETECTION_INPUTS and {"logits", "pred_boxes"} <= set(io[1])


class ObjectDetector:
    """An object-detection package in ONNX Runtime, with its image processing."""

    def __init__(self, package_dir: str | os.PathLike, *, threads: int | None = None) -> None:
        self.package_dir = Path(package_dir)
        if not is_detection_package(self.package_dir):
            raise PackageError(
                f"{self.package_dir} is not an object-detection package (its model.onnx has no "
                "logits and pred_boxes outputs)"
            )
        self.session = open_session(self.package_dir / "model.onnx", threads)
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        pixels = self.inputs.get("pixel_values")
        self.pixel_type = None if pixels is None else ORT_FLOAT_TYPES.get(pixels.type)
        if self.pixel_type is None:
            raise PackageError(
                f"{self.package_dir} must take float32 or float16 pixel_values (build it with "
                "--dtype f32 or f16)"
            )
        self.config = _read_json(self.package_dir / "config.json")
        settings = self.package_dir / "preprocessor_config.json"
        if not settings.is_file():
            raise PackageError(
                f"no preprocessor_config.json in {self.package_dir}: build from a checkpoint "
                "that has its image processor"
            )
        self.preprocess, self.postprocess = detection_processing(_read_json(settings))

    def feeds(self, image: np.ndarray) -> dict[str, np.ndarray]:
        """The graph's inputs for one ``[3, h, w]`` uint8 image."""
        pixels, mask = self.preprocess(image)
        feeds = {"pixel_values": pixels[None].astype(self.pixel_type)}
        if "pixel_mask" in self.inputs:
            feeds["pixel_mask"] = mask[None]
        return feeds

    def raw_outputs(self, image) -> tuple[np.ndarray, np.ndarray]:
        """``(logits [queries, classes], pred_boxes [queries, 4])`` of one image."""
        logits, boxes = self.session.run(["logits", "pred_boxes"], self.feeds(pixels_of(image)))
        return logits[0].astype(np.float32), boxes[0].astype(np.float32)

    def detect(self, image, threshold: float = 0.5) -> list[Detection]:
        """The boxes of ``image`` (a path, PIL image or uint8 array) scoring above ``threshold``,
        in the image's pixels, in the order transformers' pipeline lists them."""
        image = pixels_of(image)
        logits, boxes = self.raw_outputs(image)
        labels = label_names(self.config, self.postprocess.label_count(logits.shape[-1]))
        size = (image.shape[1], image.shape[2])
        return self.postprocess(logits, boxes, size, threshold, labels)


def pixels_of(image) -> np.ndarray:
    """A path (loaded as transformers' pipeline loads it), PIL image or array as ``[3, h, w]``
    uint8."""
    if isinstance(image, (str, os.PathLike)):
        image = load_image(image)
    if isinstance(image, np.ndarray) and image.ndim == 3 and image.shape[0] == 3:
        return image
    return to_chw(image)


def draw_boxes(image_path: str | os.PathLike, found: list[Detection], output: Path) -> None:
    """The image at ``image_path`` with each box outlined and labelled, saved as ``output``."""
    from PIL import ImageDraw

    image = load_image(image_path)
    draw = ImageDraw.Draw(image)
    for detection in found:
        x0, y0, x1, y1 = detection.box
        draw.rectangle([min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1)], outline="red", width=2)
        draw.text((x0 + 2, y0 + 2), f"{detection.label} {detection.score:.2f}", fill="red")
    try:
        image.save(output, format="PNG")
    except OSError as exc:
        raise MobiusError(f"cannot write {output}: {exc}") from None


def checked_run(inputs: list[str], options: dict, threshold: float) -> Path | None:
    """``mobius detect``'s checks of what every detector takes: ``--threshold`` in [0, 1],
    ``--output`` (returned) for one image only, each image a file."""
    if not (isinstance(threshold, float) and math.isfinite(threshold) and 0 <= threshold <= 1):
        raise MobiusError(f"--threshold must be a number in [0, 1], not {threshold}")
    output = options.get("boxes_png")
    if output is not None and len(inputs) != 1:
        raise MobiusError(f"--output draws one image's boxes; {len(inputs)} images were given")
    for path in inputs:
        if not Path(path).is_file():
            raise MobiusError(f"no image file at {path}")
    return None if output is None else Path(output)


def report(path: str, found: list[Detection], threshold: float, output: Path | None) -> None:
    """Print ``IMAGE: label score x0 y0 x1 y1`` per box (or that none scored), and draw them
    into ``output`` if given."""
    for detection in found:
        print(f"{path}: {detection.line()}")
    if not found:
        print(f"{path}: no object scores above {threshold}")
    if output is not None:
        draw_boxes(path, found, output)


def run_cli(package_dir: str | os.PathLike, inputs: list[str], options: dict) -> int:
    """mobius-vision's ``mobius detect`` runner: ``IMAGE: label score x0 y0 x1 y1`` per box."""
    threshold = options.get("threshold", 0.5)
    output = checked_run(inputs, options, threshold)
    detector = ObjectDetector(package_dir, threads=options.get("threads"))
    for path in inputs:
        report(path, detector.detect(path, threshold), threshold, output)
    return 0
