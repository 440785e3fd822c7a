"""Segment images with a built universal-segmentation package (MaskFormer, Mask2Former,
OneFormer), as transformers' ``post_process_semantic_segmentation`` does (OneFormer: also
its panoptic and instance post-processing).

A package of the ``universal-segmentation`` contract
(:mod:`mobius_vision.tasks.universal_segmentation`: ``pixel_values`` ->
``class_queries_logits`` ``[batch, queries, labels + 1]`` and ``masks_queries_logits``
``[batch, queries, h, w]``) runs in ONNX Runtime on pixels made as MaskFormer's (and
Mask2Former's, the same) image processor makes them from the package's
``preprocessor_config.json``: DETR's resize by ``shortest_edge``/``longest_edge``, each
side then rounded up to a multiple of ``size_divisor``; rescale, normalise; one image at a
time, so nothing to pad. Each pixel's
class score is the sum over the queries of the query's class probability (softmax, "no
object" dropped) times its mask probability (sigmoid; Mask2Former's processor first resizes
the mask logits to 384x384, :data:`MASK_SIZES`); the scores are upsampled bilinearly
to the image's own size and the class map is their argmax. The map is written and the
classes present are printed as ``mobius segment`` does for semantic-segmentation packages
(:mod:`mobius_vision.segmentation_runner`).

A package that takes a task (OneFormer's ``task_inputs``) is run for ``--task`` semantic,
instance or panoptic (the default, as OneFormer's image processor's). The task's token ids
are made with the package's tokenizer as OneFormerProcessor makes them (padding zeroed;
transformers' pipeline keeps the pad id, which only differs when that id is not 0), and
OneFormer's processor does not round the sides (no ``size_divisor``). Panoptic and instance
results are post-processed as its ``post_process_panoptic_segmentation`` /
``post_process_instance_segmentation`` do with the image-segmentation pipeline's thresholds
(:mod:`mobius_vision.processing.universal_segmentation`): the PNG holds each pixel's
segment id (0: none) and the line lists ``id:label score`` per segment.

Example::

    from mobius_vision.universal_segmentation_runner import UniversalSegmenter

    segmenter = UniversalSegmenter("maskformer-out/")
    class_map = segmenter.class_map("street.png")  # [height, width] class ids
    segmenter.shares(class_map)  # [("road", 0.41), ("car", 0.22), ...]

    oneformer = UniversalSegmenter("oneformer-out/", task="panoptic")
    segment_map, segments = oneformer.segments("street.png")  # ids, [Segment(1, 3, 0.97)...]

Needs ONNX Runtime and Pillow: ``pip install mobius-vision[run]``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mobius.classification import format_line, label_names, softmax
from mobius.errors import MobiusError
from mobius.generate import PackageError
from mobius_vision.processing._image import integer, to_chw
from mobius_vision.processing.classification import load_image, processor_type
from mobius_vision.processing.detection import DetectionProcessor
from mobius_vision.processing.universal_segmentation import SEGMENTS, TASKS, task_inputs
from mobius_vision.segmentation_runner import (
    Segmenter,
    graph_signature,
    interpolation_weights,
    mask_paths,
    save_class_map,
    segment_each,
)

#: The image processors of universal-segmentation checkpoints (the same pre-processing), and
#: the size each resizes the mask logits to before the class-mask product (Mask2Former's
#: ``post_process_semantic_segmentation``: 384x384 "for all models"; MaskFormer's: none).
MASK_SIZES: dict[str, tuple[int, int] | None] = {
    "MaskFormerImageProcessor": None,
    "Mask2FormerImageProcessor": (384, 384),
    "OneFormerImageProcessor": None,
}
#: transformers' default ``size_divisor`` of MaskFormer's processor.
SIZE_DIVISOR = 32
#: Processors that do not round the resized sides (no ``size_divisor``).
UNROUNDED = ("OneFormerImageProcessor",)


def is_universal_segmentation_package(package_dir: str | os.PathLike) -> bool:
    """Whether the package maps ``pixel_values`` (and ``task_inputs``, OneFormer) to the
    contract's two query outputs alone."""
    signature = graph_signature(package_dir)
    outputs = {"class_queries_logits": 3, "masks_queries_logits": 4}
    takes = (["pixel_values"], ["pixel_values", "task_inputs"])
    return signature is not None and signature[1] == outputs and signature[0] in takes


def takes_task(package_dir: str | os.PathLike) -> bool:
    """Whether the package's graph takes ``task_inputs`` (OneFormer)."""
    signature = graph_signature(package_dir)
    return signature is not None and "task_inputs" in signature[0]


@dataclass
class MaskFormerProcessor(DetectionProcessor):
    """MaskFormer's image processor on one image: DETR's, each resized side rounded up to a
    multiple of ``size_divisor`` (0: left as it is)."""

    size_divisor: int = SIZE_DIVISOR
    #: The size the mask logits are resized to before the product (None: kept as they are).
    mask_size: tuple[int, int] | None = None

    @classmethod
    def from_dict(cls, raw: dict) -> MaskFormerProcessor:
        """The processor a ``preprocessor_config.json`` dict describes (values checked)."""
        name = processor_type(raw)
        if name not in MASK_SIZES:
            raise MobiusError(
                f"mobius segment has no universal-segmentation image processor like {name} "
                f"(it has {', '.join(MASK_SIZES)})"
            )
        base = DetectionProcessor.from_dict(raw)
        divisor = 0 if name in UNROUNDED else integer(raw, "size_divisor", SIZE_DIVISOR, 0, 1 << 10)
        return cls(base.settings, do_pad=False, size_divisor=divisor, mask_size=MASK_SIZES[name])

    def target_size(self, size: tuple[int, int]) -> tuple[int, int]:
        height, width = super().target_size(size)
        if self.size_divisor:
            step = self.size_divisor
            height, width = (int(math.ceil(side / step) * step) for side in (height, width))
        return height, width


def bilinear_resize(maps: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``[n, h, w]`` resized to ``size`` as PyTorch's ``bilinear`` (``align_corners=False``)."""
    rows, rows_next, row_low, row_high = interpolation_weights(maps.shape[1], size[0])
    cols, cols_next, col_low, col_high = interpolation_weights(maps.shape[2], size[1])
    tall = maps[:, rows] * row_low[:, None] + maps[:, rows_next] * row_high[:, None]
    return tall[..., cols] * col_low + tall[..., cols_next] * col_high


def semantic_scores(
    class_logits: np.ndarray, mask_logits: np.ndarray, mask_size: tuple[int, int] | None = None
) -> np.ndarray:
    """``[labels, h, w]``: each query's class probabilities (no "no object") times its mask's
    sigmoid, summed over the queries (``einsum("qc,qhw->chw")``); the mask logits first
    resized bilinearly to ``mask_size`` where one is given."""
    if mask_size is not None:
        mask_logits = bilinear_resize(mask_logits.astype(np.float32), mask_size)
    classes = softmax(class_logits.astype(np.float64))[:, :-1]  # [queries, labels]
    masks = 1.0 / (1.0 + np.exp(-mask_logits.astype(np.float64)))  # [queries, h, w]
    queries, h, w = masks.shape
    scores = classes.T @ masks.reshape(queries, h * w)
    return scores.reshape(-1, h, w).astype(np.float32)


class UniversalSegmenter(Segmenter):
    """A universal-segmentation package in ONNX Runtime, with its image processor."""

    @staticmethod
    def accepts(package_dir) -> bool:
        return is_universal_segmentation_package(package_dir)

    kind = "universal-segmentation"
    layout = "pixel_values -> class_queries_logits, masks_queries_logits"

    def __init__(
        self, package_dir: str | os.PathLike, *, threads: int | None = None, task: str | None = None
    ) -> None:
        """``task`` (semantic, instance, panoptic; default panoptic) for a package that takes
        one (OneFormer); refused for one that does not."""
        super().__init__(package_dir, threads=threads)
        classes = self.session.get_outputs()[0].shape[2]
        if not isinstance(classes, int) or classes < 2:
            raise PackageError(f"{self.package_dir} scores {classes!r} classes per query")
        self._num_labels = classes - 1  # the last class is "no object"
        self.processor = MaskFormerProcessor.from_dict(self.settings)
        self.task, self.task_inputs = self._task_inputs(task)

    def _task_inputs(self, task: str | None) -> tuple[str, np.ndarray | None]:
        """The task and its ``[1, length]`` token ids (None: the graph takes no task)."""
        inputs = self.session.get_inputs()
        if len(inputs) == 1:
            if task is not None:
                raise MobiusError(
                    f"--task is for packages that take a task (OneFormer); {self.package_dir} "
                    "takes pixel_values only"
                )
            return "semantic", None
        task = TASKS[-1] if task is None else task
        if task not in TASKS:
            raise MobiusError(f"--task {task!r} is not one of {', '.join(TASKS)}")
        length = inputs[1].shape[1]
        if not isinstance(length, int) or not 0 < length <= 1 << 12:
            raise PackageError(f"{self.package_dir} takes task_inputs of length {length!r}")
        from mobius_vision.processing._settings import load_tokenizer

        return task, task_inputs(load_tokenizer(self.package_dir), task, length)

    def outputs(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One ``[3, height, width]`` uint8 image's class and mask logits (``[queries, ...]``)."""
        pixels, _ = self.processor(image)
        feed = {"pixel_values": pixels[None].astype(self.pixel_type)}
        if self.task_inputs is not None:
            feed["task_inputs"] = self.task_inputs
        class_logits, mask_logits = self.session.run(None, feed)
        return class_logits[0], mask_logits[0]

    @property
    def num_labels(self) -> int:
        return self._num_labels

    def scores(self, image: np.ndarray) -> np.ndarray:
        """``[labels, h, w]`` class scores of one ``[3, height, width]`` uint8 image, at the
        masks' resolution (:func:`semantic_scores`)."""
        class_logits, mask_logits = self.outputs(image)
        return semantic_scores(class_logits, mask_logits, self.processor.mask_size)

    def segments(self, image) -> tuple[np.ndarray, list]:
        """The ``--task`` panoptic or instance result of ``image`` (a path, PIL image or
        ``[h, w, 3]`` array): its ``[height, width]`` segment ids (0: none) and segments."""
        if isinstance(image, (str, os.PathLike)):
            image = load_image(image)
        image = to_chw(image)
        class_logits, mask_logits = self.outputs(image)
        return SEGMENTS[self.task](class_logits, mask_logits, image.shape[1:])

    def segment_line(self, name: str, segments: list) -> str:
        """``street.png: 1:car 0.953000; 2:sky 0.912000`` (``id:label score``)."""
        labels = label_names(self.config, self.num_labels)
        return format_line(name, [(f"{s.id}:{labels[s.label_id]}", s.score) for s in segments])


def run_cli(package_dir: str | os.PathLike, inputs: list[str], options: dict) -> int:
    """mobius-vision's ``mobius segment`` runner for universal-segmentation packages."""
    import functools
    import sys

    task = options.get("segment_task")
    make = functools.partial(UniversalSegmenter, task=task)
    if task == "semantic" or (task is None and not takes_task(package_dir)):
        return segment_each(make, package_dir, inputs, options)  # the class map
    for path in inputs:
        if not Path(path).is_file():
            raise MobiusError(f"no image file at {path}")
    segmenter = make(package_dir, threads=options.get("threads"))
    for path, mask in zip(inputs, mask_paths(inputs, options.get("mask_output")), strict=True):
        segment_map, segments = segmenter.segments(path)
        save_class_map(segment_map, mask)
        print(segmenter.segment_line(path, segments))
        print(f"wrote {mask}", file=sys.stderr)
    return 0
