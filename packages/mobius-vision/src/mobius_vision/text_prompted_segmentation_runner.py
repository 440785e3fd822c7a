"""Segment what text prompts name in images with a built text-prompted segmentation package.

The package (:mod:`mobius_vision.tasks.text_prompted_segmentation`, CLIPSeg: ``text/model.onnx``
embeds the prompts once, ``image/model.onnx`` scores every image against every prompt) runs
in ONNX Runtime. The prompts go through the package's tokenizer padded together, as
``CLIPSegProcessor`` tokenises them; the pixels through the image processor its settings name
(CLIPSeg's ``ViTImageProcessor``: a bilinear resize to 352 x 352, rescale, ImageNet's
normalisation). transformers has no pipeline for CLIPSeg; its users take the sigmoid of the
logits and resize it to the image, as here: each prompt's probability map is resized
bilinearly (``align_corners=False``) to the image's own size.

``mobius segment PKG IMAGE --labels "a cat,a remote"`` writes one PNG per image and label: the
probability map as 8-bit grey (0..255 for 0..1), or with ``--threshold P`` a binary mask
(255 where the probability is above P); it prints a line per image with each label's share
of pixels above the threshold (0.5 by default).

Example::

    from mobius_vision.text_prompted_segmentation_runner import TextPromptedSegmenter

    segmenter = TextPromptedSegmenter("clipseg-out/")
    maps = segmenter.probabilities("kitchen.jpg", ["a cat", "a remote"])  # [2, height, width]

Needs ONNX Runtime, Pillow and transformers' tokenizers: ``pip install mobius-vision[run]``.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mobius.classification import format_line, open_session
from mobius.errors import MobiusError
from mobius.generate import ORT_FLOAT_TYPES, PackageError, read_graph
from mobius_vision.classifier import parse_labels
from mobius_vision.detection_runner import pixels_of
from mobius_vision.processing._settings import load_tokenizer, read_settings
from mobius_vision.segmentation_runner import (
    interpolation_weights,
    mask_paths,
    segmentation_processor,
)

#: The probability above which a pixel counts as the label's (printed shares; no --threshold).
DEFAULT_SHARE_THRESHOLD = 0.5
#: The files that hold a CLIP tokenizer's vocabulary (the fast one's, or the BPE one's).
_VOCABULARY_FILES = ("tokenizer.json", "vocab.json")
#: The longest label text kept in a mask's file name.
_SLUG_CHARS = 40


def is_text_prompted_segmentation_package(package_dir: str | os.PathLike) -> bool:
    """Whether the package has the contract's ``text/`` graph and an ``image/`` graph taking
    ``conditional_embeddings`` (a zero-shot detector's ``image/`` takes ``text_embeds``)."""
    package = Path(package_dir)
    image = package / "image" / "model.onnx"
    if not ((package / "text" / "model.onnx").is_file() and image.is_file()):
        return False

    try:
        graph = read_graph(image).graph
    except PackageError:  # not an ONNX model: no runner of this kind takes it
        return False
    return any(i.name == "conditional_embeddings" for i in graph.input)


def resize_bilinear(maps: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``maps [n, h, w]`` resized to ``size`` as PyTorch's ``bilinear`` (``align_corners=False``)."""
    rows, rows_next, row_low, row_high = interpolation_weights(maps.shape[1], size[0])
    cols, cols_next, col_low, col_high = interpolation_weights(maps.shape[2], size[1])
    tall = maps[:, rows] * row_low[:, None] + maps[:, rows_next] * row_high[:, None]
    return tall[..., cols] * col_low + tall[..., cols_next] * col_high


class TextPromptedSegmenter:
    """A text-prompted segmentation package in ONNX Runtime, with its tokenizer and image
    processor."""

    def __init__(self, package_dir: str | os.PathLike, *, threads: int | None = None) -> None:
        self.package_dir = Path(package_dir)
        if not is_text_prompted_segmentation_package(self.package_dir):
            raise PackageError(
                f"{self.package_dir} is not a text-prompted segmentation package (text/model.onnx "
                "and image/model.onnx taking conditional_embeddings)"
            )
        self.text = open_session(self.package_dir / "text" / "model.onnx", threads)
        self.image = open_session(self.package_dir / "image" / "model.onnx", threads)
        pixels = next(i for i in self.image.get_inputs() if i.name == "pixel_values")
        self.pixel_type = ORT_FLOAT_TYPES.get(pixels.type)
        if self.pixel_type is None:
            raise PackageError(
                f"{self.package_dir} takes {pixels.type} pixels; build it with --dtype f32 or f16"
            )
        self.pixel_shape = tuple(pixels.shape[1:])
        settings = read_settings(self.package_dir)
        if not settings.image:
            raise PackageError(
                f"no image processor settings in {self.package_dir} (preprocessor_config.json "
                "or processor_config.json): build from a checkpoint that has its processor"
            )
        self.processor = segmentation_processor(settings.image)
        self.config = settings.config
        self._tokenizer = None

    @property
    def tokenizer(self):
        """The package's tokenizer (transformers' ``AutoTokenizer``), loaded on first use."""
        if self._tokenizer is None:
            # transformers makes an empty CLIP tokenizer from config.json alone: check first
            if not any((self.package_dir / name).is_file() for name in _VOCABULARY_FILES):
                raise PackageError(
                    f"cannot load the tokenizer of {self.package_dir}: it has none of "
                    f"{', '.join(_VOCABULARY_FILES)} (build from a checkpoint that has them)"
                )
            self._tokenizer = load_tokenizer(self.package_dir)
        return self._tokenizer

    def embed_prompts(self, labels: Sequence[str]) -> np.ndarray:
        """``conditional_embeddings [labels, dim]``: the labels tokenised together, padded to
        the longest (as ``CLIPSegProcessor``), through the text graph."""
        if not labels:
            raise MobiusError(
                'give the texts to segment with --labels, e.g. --labels "a cat,a dog"'
            )
        batch = self.tokenizer(list(labels), padding=True)
        input_ids = np.asarray(batch["input_ids"], np.int64)
        limit = (self.config.get("text_config") or {}).get("max_position_embeddings")
        if isinstance(limit, int) and input_ids.shape[1] > limit:
            raise MobiusError(
                f"a label is {input_ids.shape[1]} tokens; the text tower of {self.package_dir} "
                f"reads at most {limit}"
            )
        feeds = {
            "input_ids": input_ids,
            "attention_mask": np.asarray(batch["attention_mask"], np.int64),
        }
        (embeddings,) = self.text.run(["conditional_embeddings"], feeds)
        return embeddings

    def logits(self, image: np.ndarray, embeddings: np.ndarray) -> np.ndarray:
        """``[labels, h, w]`` mask logits of one ``[3, height, width]`` uint8 image."""
        pixels = self.processor(image)
        if pixels.shape != self.pixel_shape:
            raise PackageError(
                f"the image processor of {self.package_dir} makes {list(pixels.shape)} pixels; "
                f"its graph takes {list(self.pixel_shape)}"
            )
        feeds = {
            "pixel_values": pixels[None].astype(self.pixel_type),
            "conditional_embeddings": embeddings.astype(self.pixel_type),
        }
        (logits,) = self.image.run(["logits"], feeds)
        return np.asarray(logits[0], np.float32)

    def probabilities(self, image, labels: Sequence[str], embeddings=None) -> np.ndarray:
        """``[labels, height, width]``: each label's sigmoid probability map, resized to the
        image's size. ``image``: a path, PIL image or uint8 array; ``embeddings``: the labels'
        :meth:`embed_prompts`, to reuse over several images."""
        image = pixels_of(image)
        embeddings = self.embed_prompts(labels) if embeddings is None else embeddings
        probabilities = 1 / (1 + np.exp(-self.logits(image, embeddings)))
        return resize_bilinear(probabilities, image.shape[1:])


def label_paths(base: Path, labels: Sequence[str]) -> list[Path]:
    """One PNG per label beside ``base``: ``<base stem>.<label slug>.png`` (the slug: the
    label's letters and digits joined by ``-``; numbered where two labels share one)."""
    slugs = []
    for index, label in enumerate(labels):
        slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")[:_SLUG_CHARS] or "label"
        slugs.append(f"{slug}-{index}" if slug in slugs else slug)
    return [base.with_name(f"{base.stem}.{slug}.png") for slug in slugs]


def save_probability_png(probabilities: np.ndarray, threshold: float | None, path: Path) -> None:
    """The map as 8-bit grey: the probability times 255, or 255 above ``threshold``."""
    from PIL import Image

    if threshold is None:
        pixels = np.rint(probabilities * 255)
    else:
        pixels = np.where(probabilities > threshold, 255, 0)
    try:
        Image.fromarray(pixels.astype(np.uint8), mode="L").save(path, format="PNG")
    except OSError as exc:
        raise MobiusError(f"cannot write the mask to {path}: {exc}") from None


def run_cli(package_dir: str | os.PathLike, inputs: list[str], options: dict) -> int:
    """``mobius segment --labels`` on a text-prompted package: a PNG per image and label, and
    a line per image of each label's share of pixels above the threshold."""
    labels = parse_labels(options.get("labels"))
    if labels is None:
        raise MobiusError(
            f"{package_dir} segments what text names: give the texts with --labels, "
            'e.g. --labels "a cat,a remote"'
        )
    threshold = options.get("mask_threshold")
    if threshold is not None and not (math.isfinite(threshold) and 0 <= threshold <= 1):
        raise MobiusError(f"--threshold must be a number in [0, 1], not {threshold}")
    for path in inputs:
        if not Path(path).is_file():
            raise MobiusError(f"no image file at {path}")
    bases = mask_paths(inputs, options.get("mask_output"))
    segmenter = TextPromptedSegmenter(package_dir, threads=options.get("threads"))
    embeddings = segmenter.embed_prompts(labels)  # once for every image
    share_threshold = DEFAULT_SHARE_THRESHOLD if threshold is None else threshold
    for path, base in zip(inputs, bases, strict=True):
        maps = segmenter.probabilities(path, labels, embeddings)
        for probabilities, png in zip(maps, label_paths(base, labels), strict=True):
            save_probability_png(probabilities, threshold, png)
            print(f"wrote {png}", file=sys.stderr)
        shares = [float((m > share_threshold).mean()) for m in maps]
        print(format_line(path, list(zip(labels, shares, strict=True))))
    return 0
