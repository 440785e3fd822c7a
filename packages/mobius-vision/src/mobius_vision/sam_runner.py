"""Segment what a prompt points at with a built Segment Anything package, as transformers does.

A ``mask-generation`` package (:mod:`mobius_vision.tasks.mask_generation`) holds two
graphs: ``image_encoder`` runs once per image, ``prompt_decoder`` once per prompt. The
pixels are made as transformers' ``SamImageProcessor`` makes them (the package's
processor settings: the longest side resized to ``size.longest_edge``, rescaled,
normalised, zero-padded at the bottom and right to ``pad_size``); point and box
coordinates, given in pixels of the original image, are scaled to the resized one as
``SamProcessor`` scales them. The low-resolution masks are post-processed as
``post_process_masks`` does (bilinear to the padded size, cropped to the resized image,
bilinear to the original size, thresholded at 0), and the mask with the best predicted
IoU is kept. A SAM 2 package (``model_type`` ``sam2``) is processed as transformers'
``Sam2ImageProcessor`` and ``Sam2Processor`` do: the image resized to the square ``size``
(the aspect ratio not kept, no padding), prompts scaled to ``target_size``, the masks
resized straight back to the image.

Iterative refinement (``refine=N``, ``--refine N``), as SAM's predictor examples do it:
the decoder runs again N times with the same prompt and, as a mask prompt
(``input_masks``), the low-resolution mask of the best IoU score of the run before.

Example::

    from mobius_vision.sam_runner import MaskGenerator

    generator = MaskGenerator("sam-out/")
    masks, scores = generator.masks("truck.jpg", points=[(500, 375)], labels=[1], refine=1)
    best = masks[scores.argmax()]  # [height, width] bool

Needs ONNX Runtime and Pillow: ``pip install mobius-vision[run]``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mobius.classification import open_session
from mobius.errors import MobiusError
from mobius.generate import ORT_FLOAT_TYPES, PackageError
from mobius_vision.models._sam_any_grid import linear_weights
from mobius_vision.processing._image import (
    BILINEAR,
    ImageSettings,
    flag,
    integer,
    pad,
    size_setting,
    to_chw,
)
from mobius_vision.processing._settings import read_settings
from mobius_vision.processing.classification import load_image
from mobius_vision.segmentation_runner import mask_paths

#: The package's two graphs (the contract's names).
GRAPHS = ("image_encoder", "prompt_decoder")
#: transformers' IMAGENET_DEFAULT_MEAN and _STD: SamImageProcessor's defaults.
IMAGENET_DEFAULT = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
#: ``post_process_masks``' default threshold on the mask logits.
MASK_THRESHOLD = 0.0
#: The prompt decoder's mask prompt inputs (packages built before them have neither).
MASK_PROMPT = ("input_masks", "has_input_mask")


def is_mask_generation_package(package_dir: str | os.PathLike) -> bool:
    """Whether the package has the two graphs of the ``mask-generation`` contract."""
    return all((Path(package_dir) / graph / "model.onnx").is_file() for graph in GRAPHS)


class SamImageProcessor:
    """``SamImageProcessor``'s pixels and coordinate scaling, from a package's settings."""

    def __init__(self, settings: dict) -> None:
        self.settings = ImageSettings.from_dict(
            settings,
            size={"longest_edge": 1024},
            resample=BILINEAR,
            image_mean=IMAGENET_DEFAULT[0],
            image_std=IMAGENET_DEFAULT[1],
        )
        longest = self.settings.size.get("longest_edge")
        if longest is None:
            raise MobiusError(
                f"SAM's image processor resizes by longest_edge; size is {self.settings.size}"
            )
        self.longest_edge = longest
        pad_size = size_setting(
            settings.get("pad_size", {"height": 1024, "width": 1024}), "pad_size"
        )
        if set(pad_size) != {"height", "width"}:
            raise MobiusError(
                f"preprocessor setting pad_size must be a height and a width, got {pad_size}"
            )
        self.pad_size = (pad_size["height"], pad_size["width"])
        self.do_pad = flag(settings, "do_pad", True)
        if self.do_pad and longest > min(self.pad_size):
            raise MobiusError(
                f"preprocessor settings resize to a longest edge of {longest}, more than "
                f"pad_size {pad_size} holds"
            )

    def resized_size(self, size: tuple[int, int]) -> tuple[int, int]:
        """``(height, width)`` with the longest side ``longest_edge``, rounded half up."""
        height, width = size
        scale = self.longest_edge * 1.0 / max(height, width)
        return int(height * scale + 0.5), int(width * scale + 0.5)

    def pixels(self, image: np.ndarray) -> tuple[np.ndarray, tuple[int, int]]:
        """``([3, H, W] float32, the resized (height, width))`` of a ``[3, h, w]`` uint8 image."""
        resized = self.resized_size(image.shape[-2:])
        if self.settings.do_resize:
            image = self.settings.resize_to(image, {"height": resized[0], "width": resized[1]})
        else:
            resized = image.shape[-2:]
        image = self.settings.finish(image)
        return (pad(image, self.pad_size) if self.do_pad else image), resized

    def scale_coordinates(self, coordinates: np.ndarray, original: tuple[int, int]) -> np.ndarray:
        """``[..., 2]`` (x, y) pixels of the original image in pixels of the resized one."""
        return scaled_coordinates(coordinates, original, self.resized_size(original))

    def post_process(self, masks: np.ndarray, original, resized) -> np.ndarray:
        """Low-resolution mask logits ``[n, h, w]`` to bool masks of the original image."""
        return post_process_masks(masks, original, resized, self.pad_size)


class Sam2ImageProcessor:
    """``Sam2ImageProcessor`` and ``Sam2Processor``'s scaling: the image resized to ``size``
    (1024x1024, the aspect ratio not kept), no padding; masks resized straight back."""

    def __init__(self, settings: dict, processor: dict) -> None:
        self.settings = ImageSettings.from_dict(
            settings,
            size={"height": 1024, "width": 1024},
            resample=BILINEAR,
            image_mean=IMAGENET_DEFAULT[0],
            image_std=IMAGENET_DEFAULT[1],
        )
        size = self.settings.size
        if set(size) != {"height", "width"} or size["height"] != size["width"]:
            raise MobiusError(f"SAM 2's image processor resizes to a square; size is {size}")
        # Sam2Processor scales prompts to target_size (the image size unless set)
        self.target_size = integer(processor, "target_size", size["height"], 1)

    def pixels(self, image: np.ndarray) -> tuple[np.ndarray, tuple[int, int]]:
        """``([3, H, W] float32, (H, W))`` of a ``[3, h, w]`` uint8 image."""
        if self.settings.do_resize:
            image = self.settings.resize_to(image)
        return self.settings.finish(image), tuple(image.shape[-2:])

    def scale_coordinates(self, coordinates: np.ndarray, original: tuple[int, int]) -> np.ndarray:
        return scaled_coordinates(coordinates, original, (self.target_size, self.target_size))

    def post_process(self, masks: np.ndarray, original, resized) -> np.ndarray:
        """``post_process_masks``: bilinear to the original size, thresholded at 0."""
        return resize_bilinear(masks, original) > MASK_THRESHOLD


def scaled_coordinates(coordinates, original: tuple[int, int], resized: tuple[int, int]):
    """``[..., 2]`` (x, y) pixels of the ``original`` (height, width) in ``resized`` ones."""
    scaled = np.array(coordinates, dtype=np.float64)
    scaled[..., 0] *= resized[1] / original[1]
    scaled[..., 1] *= resized[0] / original[0]
    return scaled.astype(np.float32)


def image_processor(package_dir: Path):
    """The package family's processor: SAM 2's, or SAM's (SAM, SAM-HQ)."""
    settings = read_settings(package_dir)
    if settings.model_type == "sam2":
        return Sam2ImageProcessor(settings.image, settings.processor)
    return SamImageProcessor(settings.image)


def resize_bilinear(masks: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``[n, h, w]`` resized to ``size`` as ``F.interpolate(mode="bilinear", align_corners=False)``."""
    rows = linear_weights(masks.shape[-2], size[0])
    cols = linear_weights(masks.shape[-1], size[1])
    return np.einsum("ij,njk,lk->nil", rows, masks.astype(np.float32), cols).astype(np.float32)


def post_process_masks(
    masks: np.ndarray,
    original: tuple[int, int],
    resized: tuple[int, int],
    pad_size: tuple[int, int],
) -> np.ndarray:
    """Low-resolution mask logits ``[n, h, w]`` to ``[n, height, width]`` bool masks of the
    original image (transformers' ``post_process_masks``, module docstring)."""
    padded = resize_bilinear(masks, pad_size)[:, : resized[0], : resized[1]]
    return resize_bilinear(padded, original) > MASK_THRESHOLD


def _pair_list(values, name: str, width: int) -> np.ndarray:
    array = (
        np.asarray(values, dtype=np.float64).reshape(-1, width)
        if len(values)
        else np.zeros((0, width))
    )
    if not np.isfinite(array).all():
        raise MobiusError(f"{name} must be finite numbers")
    return array


@dataclass
class MaskPrediction:
    """One prompt's result: ``masks [num_masks, height, width]`` bool (the image's size),
    ``iou_scores [num_masks]``, ``low_res_masks [num_masks, 4h, 4w]`` (the decoder's logits,
    a mask prompt for a next run) and SAM 2's ``object_score`` logit (None for others)."""

    masks: np.ndarray
    iou_scores: np.ndarray
    low_res_masks: np.ndarray
    object_score: float | None = None


class MaskGenerator:
    """A ``mask-generation`` package in ONNX Runtime with SAM's processing."""

    def __init__(self, package_dir: str | os.PathLike, *, threads: int | None = None) -> None:
        self.package_dir = Path(package_dir)
        if not is_mask_generation_package(self.package_dir):
            raise PackageError(
                f"{self.package_dir} is not a mask-generation package (no "
                f"{' and '.join(g + '/model.onnx' for g in GRAPHS)})"
            )
        self.encoder = open_session(self.package_dir / GRAPHS[0] / "model.onnx", threads)
        self.decoder = open_session(self.package_dir / GRAPHS[1] / "model.onnx", threads)
        pixels = self.encoder.get_inputs()[0]
        self.pixel_type = ORT_FLOAT_TYPES.get(pixels.type)
        if pixels.name != "pixel_values" or self.pixel_type is None:
            raise PackageError(f"{self.package_dir}'s image encoder takes no float pixel_values")
        self.pixel_shape = tuple(pixels.shape[1:])
        self.processor = image_processor(self.package_dir)
        inputs = {i.name: i.shape for i in self.decoder.get_inputs()}
        self.mask_prompt_shape = (
            tuple(inputs[MASK_PROMPT[0]][1:]) if set(MASK_PROMPT) <= set(inputs) else None
        )
        self.outputs = [o.name for o in self.decoder.get_outputs()]

    def embed(self, image) -> tuple[dict[str, np.ndarray], tuple[int, int], tuple[int, int]]:
        """The image encoder's outputs for one image (a path, PIL image or uint8 array), with
        the image's original and resized ``(height, width)``."""
        chw = to_chw(load_image(image) if isinstance(image, (str, os.PathLike)) else image)
        pixels, resized = self.processor.pixels(chw)
        if pixels.shape != self.pixel_shape:
            raise PackageError(
                f"the image processor of {self.package_dir} makes {list(pixels.shape)} pixels; "
                f"its image encoder takes {list(self.pixel_shape)}"
            )
        names = [o.name for o in self.encoder.get_outputs()]
        values = self.encoder.run(names, {"pixel_values": pixels[None].astype(self.pixel_type)})
        return dict(zip(names, values, strict=True)), tuple(chw.shape[-2:]), resized

    def masks(
        self,
        image,
        points: Sequence = (),
        labels: Sequence[int] | None = None,
        box: Sequence[float] | None = None,
        refine: int = 0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(masks [num_masks, height, width] bool, iou_scores [num_masks])`` of one prompt
        (:meth:`predict`)."""
        prediction = self.predict(image, points, labels, box, refine)
        return prediction.masks, prediction.iou_scores

    def predict(
        self,
        image,
        points: Sequence = (),
        labels: Sequence[int] | None = None,
        box: Sequence[float] | None = None,
        refine: int = 0,
    ) -> MaskPrediction:
        """The masks of one prompt: ``points`` (x, y) in pixels of the image with their
        ``labels`` (1 foreground, 0 background; all 1 by default) and an optional ``box``
        (x0, y0, x1, y1); ``refine`` more runs, each with the last run's best mask as a
        mask prompt (module docstring)."""
        points = _pair_list(points, "points", 2)
        boxes = _pair_list([] if box is None else box, "box", 4)
        if not len(points) and not len(boxes):
            raise MobiusError("give a point or a box to segment (--point X,Y or --box X0,Y0,X1,Y1)")
        labels = np.ones(len(points), np.int64) if labels is None else np.asarray(labels, np.int64)
        if labels.shape != (len(points),):
            raise MobiusError(f"{len(points)} points but {labels.size} labels")
        if isinstance(refine, bool) or not isinstance(refine, int) or refine < 0:
            raise MobiusError(f"refine takes a count of runs, 0 or more, got {refine!r}")
        if refine and self.mask_prompt_shape is None:
            raise PackageError(
                f"{self.package_dir}'s prompt decoder takes no mask prompt (input_masks): "
                "rebuild the package with this mobius to refine"
            )
        image_outputs, original, resized = self.embed(image)
        scale = self.processor.scale_coordinates
        float_type = self.pixel_type
        feeds = {
            **image_outputs,
            "input_points": scale(points, original).reshape(1, 1, -1, 2).astype(float_type),
            "input_labels": labels.reshape(1, 1, -1),
            "input_boxes": scale(boxes.reshape(-1, 2, 2), original)
            .reshape(1, -1, 4)
            .astype(float_type),
        }
        if self.mask_prompt_shape is not None:  # no mask prompt on the first run
            feeds[MASK_PROMPT[0]] = np.zeros((1, *self.mask_prompt_shape), float_type)
            feeds[MASK_PROMPT[1]] = np.zeros(1, float_type)
        for _ in range(refine + 1):
            outputs = dict(zip(self.outputs, self.decoder.run(self.outputs, feeds), strict=True))
            low_res = np.asarray(outputs["pred_masks"][0, 0], np.float32)
            scores = np.asarray(outputs["iou_scores"][0, 0], np.float32)
            best = low_res[int(scores.argmax())]
            feeds[MASK_PROMPT[0]] = best[None, None].astype(float_type)
            feeds[MASK_PROMPT[1]] = np.ones(1, float_type)
        object_score = outputs.get("object_score_logits")
        return MaskPrediction(
            self.processor.post_process(low_res, original, resized),
            scores,
            low_res,
            None if object_score is None else float(object_score.reshape(-1)[0]),
        )


def save_mask(mask: np.ndarray, path: str | os.PathLike) -> None:
    """A bool ``[height, width]`` mask as a black-and-white PNG (255 inside)."""
    from PIL import Image

    Image.fromarray(mask.astype(np.uint8) * 255, mode="L").save(path, format="PNG")


def parse_numbers(text: str, count: int, option: str) -> tuple[float, ...]:
    """``"x,y"`` (``count`` comma-separated numbers) of ``option``, or a one-line MobiusError."""
    parts = text.split(",")
    try:
        numbers = tuple(float(part) for part in parts)
    except ValueError:
        numbers = ()
    if len(numbers) != count or not all(np.isfinite(numbers)):
        raise MobiusError(f"{option} takes {count} comma-separated numbers, got {text!r}")
    return numbers


def prompt_of(options: dict) -> tuple[list, list[int], tuple[float, ...] | None]:
    """``(points, labels, box)`` from ``--point``, ``--background-point`` and ``--box``."""
    foreground = [parse_numbers(p, 2, "--point") for p in options.get("points") or ()]
    background = [
        parse_numbers(p, 2, "--background-point") for p in options.get("background_points") or ()
    ]
    box = options.get("box")
    box = None if box is None else parse_numbers(box, 4, "--box")
    if box is not None and (box[2] < box[0] or box[3] < box[1]):
        raise MobiusError(
            f"--box takes the top-left corner then the bottom-right one, got {options['box']!r}"
        )
    return foreground + background, [1] * len(foreground) + [0] * len(background), box


def run_cli(package_dir: str | os.PathLike, inputs: list[str], options: dict) -> int:
    """mobius-vision's ``mobius segment`` runner for Segment Anything packages: per image, the
    mask with the best predicted IoU as a PNG and a line of every mask's IoU score (and SAM
    2's object score logit); ``--refine N`` runs the decoder N more times (module docstring)."""
    points, labels, box = prompt_of(options)
    refine = options.get("refine") or 0
    if refine < 0:
        raise MobiusError(f"--refine takes a count of runs, 0 or more, got {refine}")
    if not points and box is None:
        raise MobiusError(
            f"{package_dir} is a Segment Anything package: say what to segment with "
            "--point X,Y (repeatable), --background-point X,Y or --box X0,Y0,X1,Y1"
        )
    for path in inputs:
        if not Path(path).is_file():
            raise MobiusError(f"no image file at {path}")
    generator = MaskGenerator(package_dir, threads=options.get("threads"))
    for path, target in zip(inputs, mask_paths(inputs, options.get("mask_output")), strict=True):
        prediction = generator.predict(path, points, labels, box, refine)
        scores = prediction.iou_scores
        best = int(scores.argmax())
        save_mask(prediction.masks[best], target)
        listed = " ".join(f"{score:.4f}" for score in scores)
        line = f"{path}: mask {best} of {len(scores)} (IoU scores {listed})"
        if prediction.object_score is not None:
            line += f" object score {prediction.object_score:.4f}"
        print(f"{line} -> {target}")
        print(f"wrote {target}", file=sys.stderr)
    return 0
