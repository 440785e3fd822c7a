"""Segment images with a built semantic-segmentation package, as transformers' pipeline does.

A package of the ``semantic-segmentation`` contract (:mod:`mobius_vision.tasks.semantic_segmentation`:
``pixel_values`` -> ``logits`` ``[batch, labels, h, w]``) runs in ONNX Runtime on pixels made
as its image processor makes them (the package's ``preprocessor_config.json``: SegFormer's
processor, which UperNet checkpoints use too, BEiT's or DPT's: a resize to a fixed size,
rescale, normalise; one that keeps the aspect ratio makes sizes the graph does not take,
which is refused, naming both). The logits are upsampled bilinearly to the
image's own size (``align_corners=False``) and the class of each pixel is their argmax,
as ``post_process_semantic_segmentation`` computes it; the class map is written as a PNG
(palette mode, the pixel value being the class id; 16-bit greyscale past 256 classes) and
the classes present are printed with their share of the pixels, largest first.

Example::

    from mobius_vision.segmentation_runner import SemanticSegmenter

    segmenter = SemanticSegmenter("segformer-out/")
    class_map = segmenter.class_map("street.png")  # [height, width] class ids
    segmenter.shares(class_map)  # [("road", 0.41), ("car", 0.22), ...]

Needs ONNX Runtime and Pillow: ``pip install mobius-vision[run]``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from mobius.classification import format_line, label_names, open_session
from mobius.errors import MobiusError
from mobius.generate import ORT_FLOAT_TYPES, PackageError, _read_json, read_graph
from mobius_vision.processing._image import BILINEAR, ImageSettings, to_chw
from mobius_vision.processing.classification import (
    FAMILIES,
    Family,
    load_image,
    processor_type,
)

#: transformers' IMAGENET_DEFAULT_MEAN and _STD.
IMAGENET_DEFAULT = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
#: The image processors of segmentation checkpoints, beside the classifiers' (ViT, BEiT...).
SEGMENTATION_FAMILIES = {
    "SegformerImageProcessor": Family(
        BILINEAR, {"height": 512, "width": 512}, mean_std=IMAGENET_DEFAULT
    ),
}
#: Upsampled logits held at once while taking the argmax (floats): bounds the memory.
_CHUNK_FLOATS = 1 << 24


def graph_signature(package_dir: str | os.PathLike) -> tuple[list[str], dict[str, int]] | None:
    """The input names and each output's rank of the package's ``model.onnx`` (None without one)."""
    graph = Path(package_dir) / "model.onnx"
    if not graph.is_file():
        return None

    model = read_graph(graph)  # PackageError if not ONNX
    ranks = {o.name: len(o.type.tensor_type.shape.dim) for o in model.graph.output}
    return [i.name for i in model.graph.input], ranks


def is_semantic_segmentation_package(package_dir: str | os.PathLike) -> bool:
    """Whether the package maps ``pixel_values`` to ``[batch, labels, h, w]`` ``logits`` alone."""
    signature = graph_signature(package_dir)
    return signature is not None and signature == (["pixel_values"], {"logits": 4})


def dpt_processor(settings: dict):
    """DPT's processor (its own resize rules), as ``mobius depth`` makes it."""
    from mobius_vision.depth_runner import DptProcessor

    return DptProcessor.from_dict(settings)


#: Processors with resize rules of their own, beside the families: name -> maker.
OWN_PROCESSORS = {"DPTImageProcessor": dpt_processor}


def segmentation_processor(settings: dict):
    """The image processor a segmentation package's ``preprocessor_config.json`` describes:
    a callable from one image to its ``[3, height, width]`` float32 pixels."""
    name = processor_type(settings)
    if name in OWN_PROCESSORS:
        return OWN_PROCESSORS[name](settings)
    family = {**FAMILIES, **SEGMENTATION_FAMILIES}.get(name)
    if family is None:
        known = ", ".join(sorted({*FAMILIES, *SEGMENTATION_FAMILIES, *OWN_PROCESSORS}))
        raise MobiusError(f"mobius segment has no image processor like {name} yet (it has {known})")
    return family.processor.from_settings(ImageSettings.from_dict(settings, **family.defaults()))


def interpolation_weights(size_in: int, size_out: int):
    """Source indices and weights of PyTorch's ``bilinear`` (``align_corners=False``) on one axis."""
    scale = size_in / size_out
    source = np.maximum((np.arange(size_out, dtype=np.float64) + 0.5) * scale - 0.5, 0.0)
    low = np.minimum(np.floor(source).astype(np.int64), size_in - 1)
    high = np.minimum(low + 1, size_in - 1)
    weight_high = (source - low).astype(np.float32)
    return low, high, 1 - weight_high, weight_high


def upsampled_argmax(logits: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """The argmax over classes of ``logits`` ``[labels, h, w]`` resized bilinearly to ``size``:
    ``post_process_semantic_segmentation``'s class map, ``[height, width]`` int64.

    Computed a band of rows at a time, so a large image does not hold every class's
    upsampled logits at once.
    """
    labels, h, w = logits.shape
    height, width = size
    rows, rows_next, row_low, row_high = interpolation_weights(h, height)
    cols, cols_next, col_low, col_high = interpolation_weights(w, width)

    def widen(band: np.ndarray) -> np.ndarray:  # [labels, n, w] -> [labels, n, width]
        return band[..., cols] * col_low + band[..., cols_next] * col_high

    band = max(1, _CHUNK_FLOATS // max(1, labels * width))
    class_map = np.empty((height, width), np.int64)
    for start in range(0, height, band):
        part = slice(start, start + band)
        top, bottom = widen(logits[:, rows[part]]), widen(logits[:, rows_next[part]])
        resized = top * row_low[part, None] + bottom * row_high[part, None]
        class_map[part] = resized.argmax(axis=0)
    return class_map


def palette(count: int) -> list[int]:
    """PASCAL VOC's colour map for class ids ``0..count-1``, flat ``[r, g, b, ...]``."""
    colours = []
    for index in range(count):
        r = g = b = 0
        value = index
        for shift in range(7, -1, -1):
            r |= (value & 1) << shift
            g |= ((value >> 1) & 1) << shift
            b |= ((value >> 2) & 1) << shift
            value >>= 3
        colours += [r, g, b]
    return colours


def save_class_map(class_map: np.ndarray, path: str | os.PathLike) -> None:
    """A PNG whose pixel values are the class ids: palette mode up to 256 classes (coloured
    by :func:`palette`), else 16-bit greyscale."""
    from PIL import Image

    if class_map.max(initial=0) < 256:
        image = Image.fromarray(class_map.astype(np.uint8), mode="P")
        image.putpalette(palette(256))
    else:
        image = Image.fromarray(class_map.astype(np.uint16))
    try:
        image.save(path, format="PNG")
    except OSError as exc:
        raise MobiusError(f"cannot write the mask to {path}: {exc}") from None


class Segmenter:
    """A segmentation package in ONNX Runtime, with its image processor: the checks and the
    class map every contract shares; a subclass reads its graph's outputs (:meth:`scores`)."""

    #: What the package is and its graph's layout, for the error that says it is not one.
    kind = layout = ""

    @staticmethod
    def accepts(package_dir) -> bool:
        """Whether ``package_dir`` holds this segmenter's kind of package."""
        raise NotImplementedError

    def __init__(self, package_dir: str | os.PathLike, *, threads: int | None = None) -> None:
        self.package_dir = Path(package_dir)
        if not self.accepts(self.package_dir):
            raise PackageError(f"{self.package_dir} is not a {self.kind} package ({self.layout})")
        self.session = open_session(self.package_dir / "model.onnx", threads)
        pixels = self.session.get_inputs()[0]
        self.pixel_type = ORT_FLOAT_TYPES.get(pixels.type)
        if self.pixel_type is None:
            raise PackageError(
                f"{self.package_dir} takes {pixels.type} pixels; build it with --dtype f32 or f16"
            )
        self.pixel_shape = tuple(pixels.shape[1:])
        self.config = _read_json(self.package_dir / "config.json")
        settings = self.package_dir / "preprocessor_config.json"
        if not settings.is_file():
            raise MobiusError(
                f"no preprocessor_config.json in {self.package_dir}: build from a checkpoint "
                "that has its image processor"
            )
        self.settings = _read_json(settings)

    @property
    def num_labels(self) -> int:
        raise NotImplementedError

    def scores(self, image: np.ndarray) -> np.ndarray:
        """``[labels, h, w]`` class scores of one ``[3, height, width]`` uint8 image."""
        raise NotImplementedError

    def class_map(self, image) -> np.ndarray:
        """The class id of every pixel of ``image`` (a path, PIL image or ``[h, w, 3]`` array)."""
        if isinstance(image, (str, os.PathLike)):
            image = load_image(image)
        image = to_chw(image)
        return upsampled_argmax(self.scores(image), image.shape[1:])

    def shares(self, class_map: np.ndarray) -> list[tuple[str, float]]:
        """The classes present in ``class_map`` with their share of its pixels, largest first."""
        counts = np.bincount(class_map.reshape(-1), minlength=1)
        names = label_names(self.config, self.num_labels)
        present = [(names[i], count / class_map.size) for i, count in enumerate(counts) if count]
        return sorted(present, key=lambda pair: -pair[1])


class SemanticSegmenter(Segmenter):
    """A semantic-segmentation package in ONNX Runtime, with its image processor."""

    @staticmethod
    def accepts(package_dir) -> bool:
        return is_semantic_segmentation_package(package_dir)

    kind, layout = "semantic-segmentation", "pixel_values -> logits [batch, labels, h, w]"

    def __init__(self, package_dir: str | os.PathLike, *, threads: int | None = None) -> None:
        super().__init__(package_dir, threads=threads)
        self.processor = segmentation_processor(self.settings)

    @property
    def num_labels(self) -> int:
        return self.session.get_outputs()[0].shape[1]

    def logits(self, image: np.ndarray) -> np.ndarray:
        """``[labels, h, w]`` logits of one ``[3, height, width]`` uint8 image."""
        pixels = self.processor(image)
        if pixels.shape != self.pixel_shape:
            raise PackageError(
                f"the image processor of {self.package_dir} makes {list(pixels.shape)} pixels; "
                f"its graph takes {list(self.pixel_shape)}"
            )
        (logits,) = self.session.run(None, {"pixel_values": pixels[None].astype(self.pixel_type)})
        return np.asarray(logits[0], np.float32)

    scores = logits


def mask_paths(inputs: list[str], output: str | None) -> list[Path]:
    """Where each image's mask goes: ``--output`` for one image (a file), a folder of
    ``<stem>.png`` for several; without it ``<stem>.segment.png`` in the current folder."""
    if output is None:
        return [Path(f"{Path(p).stem}.segment.png") for p in inputs]
    if len(inputs) == 1 and not Path(output).is_dir():
        return [Path(output)]
    folder = Path(output)
    if folder.exists() and not folder.is_dir():
        raise MobiusError(f"--output {output} is a file; several images need a folder")
    folder.mkdir(parents=True, exist_ok=True)
    stems = [Path(p).stem for p in inputs]
    if len(set(stems)) != len(stems):
        raise MobiusError("two images share a file name; segment them one at a time")
    return [folder / f"{stem}.png" for stem in stems]


def segment_each(
    segmenter_class: type[Segmenter], package_dir: str | os.PathLike, inputs: list[str], options
) -> int:
    """``mobius segment`` with ``segmenter_class``: a mask PNG per image and a line of the
    classes present with their pixel shares."""
    import sys

    for path in inputs:
        if not Path(path).is_file():
            raise MobiusError(f"no image file at {path}")
    segmenter = segmenter_class(package_dir, threads=options.get("threads"))
    for path, mask in zip(inputs, mask_paths(inputs, options.get("mask_output")), strict=True):
        class_map = segmenter.class_map(path)
        save_class_map(class_map, mask)
        print(format_line(path, segmenter.shares(class_map)))
        print(f"wrote {mask}", file=sys.stderr)
    return 0


def run_cli(package_dir: str | os.PathLike, inputs: list[str], options: dict) -> int:
    """mobius-vision's ``mobius segment`` runner for semantic-segmentation packages."""
    return segment_each(SemanticSegmenter, package_dir, inputs, options)
