"""Segment images with a built universal-segmentation package (MaskFormer, Mask2Former), as
transformers' ``post_process_semantic_segmentation`` does.

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

Example::

    from mobius_vision.universal_segmentation_runner import UniversalSegmenter

    segmenter = UniversalSegmenter("maskformer-out/")
    class_map = segmenter.class_map("street.png")  # [height, width] class ids
    segmenter.shares(class_map)  # [("road", 0.41), ("car", 0.22), ...]

Needs ONNX Runtime and Pillow: ``pip install mobius-vision[run]``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from mobius.classification import softmax
from mobius.errors import MobiusError
from mobius.generate import PackageError
from mobius_vision.processing._image import integer
from mobius_vision.processing.classification import processor_type
from mobius_vision.processing.detection import DetectionProcessor
from mobius_vision.segmentation_runner import (
    Segmenter,
    graph_signature,
    interpolation_weights,
    segment_each,
)

#: The image processors of universal-segmentation checkpoints (the same pre-processing), and
#: the size each resizes the mask logits to before the class-mask product (Mask2Former's
#: ``post_process_semantic_segmentation``: 384x384 "for all models"; MaskFormer's: none).
MASK_SIZES: dict[str, tuple[int, int] | None] = {
    "MaskFormerImageProcessor": None,
    "Mask2FormerImageProcessor": (384, 384),
}
#: transformers' default ``size_divisor`` of MaskFormer's processor.
SIZE_DIVISOR = 32


def is_universal_segmentation_package(package_dir: str | os.PathLike) -> bool:
    """Whether the package maps ``pixel_values`` to the contract's two query outputs alone."""
    signature = graph_signature(package_dir)
    expected = (["pixel_values"], {"class_queries_logits": 3, "masks_queries_logits": 4})
    return signature is not None and signature == expected


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
        divisor = integer(raw, "size_divisor", SIZE_DIVISOR, 0, 1 << 10)
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

    def __init__(self, package_dir: str | os.PathLike, *, threads: int | None = None) -> None:
        super().__init__(package_dir, threads=threads)
        classes = self.session.get_outputs()[0].shape[2]
        if not isinstance(classes, int) or classes < 2:
            raise PackageError(f"{self.package_dir} scores {classes!r} classes per query")
        self._num_labels = classes - 1  # the last class is "no object"
        self.processor = MaskFormerProcessor.from_dict(self.settings)

    @property
    def num_labels(self) -> int:
        return self._num_labels

    def scores(self, image: np.ndarray) -> np.ndarray:
        """``[labels, h, w]`` class scores of one ``[3, height, width]`` uint8 image, at the
        masks' resolution (:func:`semantic_scores`)."""
        pixels, _ = self.processor(image)
        feed = {"pixel_values": pixels[None].astype(self.pixel_type)}
        class_logits, mask_logits = self.session.run(None, feed)
        return semantic_scores(class_logits[0], mask_logits[0], self.processor.mask_size)


def run_cli(package_dir: str | os.PathLike, inputs: list[str], options: dict) -> int:
    """mobius-vision's ``mobius segment`` runner for universal-segmentation packages."""
    return segment_each(UniversalSegmenter, package_dir, inputs, options)
