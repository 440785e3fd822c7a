"""The image processing of object detectors, without torch: pixels in, boxes out.

Pre-processing (:class:`DetectionProcessor`) is transformers' DETR image processor
(also Conditional DETR's, Deformable DETR's and Table Transformer's, which share its
rules; YOLOS's rounds the sides to a multiple of 16, :class:`YolosProcessor`; RT-DETR's,
also D-FINE's, only changes the defaults, :class:`RTDetrProcessor`): resize by ``shortest_edge``/``longest_edge`` keeping the aspect ratio
(or to ``max_height``/``max_width``, or exactly ``height``/``width``), rescale, normalise,
and pad at the bottom and right to ``pad_size`` where set, with the ``pixel_mask`` of
the real pixels. One image at a time, as transformers' pipeline feeds them, so there is
no batch to pad to.

Post-processing turns one image's ``logits`` and ``pred_boxes`` into
:class:`Detection` s, as the image processor's ``post_process_object_detection`` does
(transformers' pipeline calls the processor's, so the processor class picks the rule):
:class:`SoftmaxDetections` (DETR, YOLOS: softmax, the "no object" class dropped, the best
class per query) or :class:`SigmoidTopKDetections` (Conditional and Deformable DETR: a
sigmoid per class, the ``top_k`` best (query, class) pairs; RT-DETR's keeps as many pairs as
there are queries, :class:`SigmoidTopQueriesDetections`). :data:`POST_PROCESSORS` maps a
processor class to its rule; a family whose processor has another adds it there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mobius.classification import softmax
from mobius.errors import MobiusError
from mobius_vision.processing._image import (
    BILINEAR,
    ImageSettings,
    flag,
    image_size,
    integer,
    resize,
    size_setting,
)

#: transformers' IMAGENET_DEFAULT_MEAN and _STD, the DETR processors' defaults.
IMAGENET_DEFAULT = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


@dataclass(frozen=True)
class Detection:
    """One box: its label, score and corners ``(x0, y0, x1, y1)`` in the image's pixels."""

    label: str
    score: float
    box: tuple[float, float, float, float]

    def line(self) -> str:
        """``cat 0.912345 10.0 20.5 110.2 200.0``: what ``mobius detect`` prints."""
        corners = " ".join(f"{v:.2f}" for v in self.box)
        return f"{self.label} {self.score:.6f} {corners}"


def aspect_ratio_size(size: tuple[int, int], shortest: int, longest: int) -> tuple[int, int]:
    """transformers' ``get_size_with_aspect_ratio``: the shorter side ``shortest`` unless the
    longer would pass ``longest``, then the longer side ``longest``; sides truncated."""
    height, width = size
    raw = None
    low, high = float(min(height, width)), float(max(height, width))
    if high / low * shortest > longest:
        raw = longest * low / high
        shortest = int(round(raw))
    if (height <= width and height == shortest) or (width <= height and width == shortest):
        return height, width
    scale = raw if raw is not None else shortest
    if width < height:
        return int(scale * height / width), shortest
    return shortest, int(scale * width / height)


def max_height_width_size(size: tuple[int, int], max_height: int, max_width: int):
    """transformers' ``get_image_size_for_max_height_width``: the largest size within both."""
    height, width = size
    scale = min(max_height / height, max_width / width)
    return int(height * scale), int(width * scale)


@dataclass
class DetectionProcessor:
    """DETR's image processor on one image: ``(pixel_values [3, h, w], pixel_mask [h, w])``."""

    settings: ImageSettings
    do_pad: bool = True
    pad_size: dict | None = None

    @classmethod
    def from_dict(cls, raw: dict) -> DetectionProcessor:
        """The processor a ``preprocessor_config.json`` dict describes (values checked)."""
        raw = dict(raw, size=detection_size(raw))
        settings = ImageSettings.from_dict(
            raw,
            resample=BILINEAR,
            image_mean=IMAGENET_DEFAULT[0],
            image_std=IMAGENET_DEFAULT[1],
        )
        pad_size = raw.get("pad_size")
        return cls(
            settings,
            do_pad=flag(raw, "do_pad", True),
            pad_size=None if pad_size is None else size_setting(pad_size, "pad_size"),
        )

    def target_size(self, size: tuple[int, int]) -> tuple[int, int]:
        """The size an image of ``size`` is resized to."""
        rule = self.settings.size
        if "shortest_edge" in rule and "longest_edge" in rule:
            return aspect_ratio_size(size, rule["shortest_edge"], rule["longest_edge"])
        if "max_height" in rule and "max_width" in rule:
            return max_height_width_size(size, rule["max_height"], rule["max_width"])
        if "height" in rule and "width" in rule:
            return rule["height"], rule["width"]
        raise MobiusError(f"preprocessor setting size {rule} is not a detection resize rule")

    def __call__(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``image`` (``[3, h, w]`` uint8) as model inputs."""
        settings = self.settings
        if settings.do_resize:
            target = self.target_size(image_size(image))
            if min(target) < 1:
                raise MobiusError(
                    f"an image of {image_size(image)} pixels resizes to {target} by "
                    f"preprocessor_config.json's size {settings.size}: too small to detect in"
                )
            image = resize(image, target, settings.resample)
        pixels = settings.finish(image)
        height, width = image_size(pixels)
        mask = np.ones((height, width), np.int64)
        if self.do_pad and self.pad_size is not None:
            padded = (self.pad_size["height"], self.pad_size["width"])
            if padded[0] < height or padded[1] < width:
                raise MobiusError(f"pad_size {padded} is smaller than the resized image")
            canvas = np.zeros((pixels.shape[0], *padded), pixels.dtype)
            canvas[:, :height, :width] = pixels
            mask = np.zeros(padded, np.int64)
            mask[:height, :width] = 1
            pixels = canvas
        return pixels, mask


#: YOLOS's resize rounds both sides down to a multiple of this (transformers'
#: ``get_size_with_aspect_ratio_yolos``).
YOLOS_MULTIPLE = 16


def yolos_aspect_ratio_size(size: tuple[int, int], shortest: int, longest: int):
    """YOLOS's shortest/longest-edge size: DETR's rule (the same cases, tested in another
    order that gives the same sizes), each side then rounded down to a multiple of 16."""
    height, width = aspect_ratio_size(size, shortest, longest)
    return height - height % YOLOS_MULTIPLE, width - width % YOLOS_MULTIPLE


@dataclass
class YolosProcessor(DetectionProcessor):
    """YOLOS's image processor: DETR's, with sides of a multiple of 16 by edge rules."""

    def target_size(self, size: tuple[int, int]) -> tuple[int, int]:
        rule = self.settings.size
        if "shortest_edge" in rule and "longest_edge" in rule:
            return yolos_aspect_ratio_size(size, rule["shortest_edge"], rule["longest_edge"])
        return super().target_size(size)


def processor_name(raw: dict) -> str:
    """The slow transformers class a ``preprocessor_config.json`` names (no Fast/Pil suffix)."""
    name = raw.get("image_processor_type") or raw.get("feature_extractor_type")
    if not isinstance(name, str) or not name:
        raise MobiusError("preprocessor_config.json names no image_processor_type")
    for suffix in ("Fast", "Pil"):
        name = name.removesuffix(suffix)
    return name.replace("FeatureExtractor", "ImageProcessor")


def detection_size(raw: dict) -> dict:
    """``size`` as the DETR processors read it: an int is the shortest edge, with ``max_size``
    (default 1333) the longest; absent, ``800`` and ``1333``."""
    size = raw.get("size")
    if size is None:
        return {"shortest_edge": 800, "longest_edge": 1333}
    if isinstance(size, int) and not isinstance(size, bool):
        longest = integer(raw, "max_size", 1333, 1, 1 << 16)
        return {"shortest_edge": size, "longest_edge": longest}
    return size_setting(size)


def corners(boxes: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``(cx, cy, w, h)`` normalised boxes ``[n, 4]`` as pixel corners in an image of ``size``."""
    cx, cy, w, h = (boxes[:, i] for i in range(4))
    corner = np.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], axis=-1)
    height, width = size
    return corner * np.asarray([width, height, width, height], np.float32)


class SoftmaxDetections:
    """DETR's rule: a softmax over the classes, the last ("no object") dropped, each query's
    best class kept where its score passes the threshold."""

    def label_count(self, classes: int) -> int:
        """How many of the graph's classes are labels."""
        return classes - 1

    def __call__(self, logits, boxes, size, threshold, labels) -> list[Detection]:
        probabilities = softmax(logits.astype(np.float32))[:, :-1]
        classes = probabilities.argmax(-1)
        scores = probabilities.max(-1)
        keep = scores > threshold
        return detections(labels, classes[keep], scores[keep], corners(boxes, size)[keep])


@dataclass
class SigmoidTopKDetections:
    """Conditional DETR's rule: a sigmoid per (query, class), the ``top_k`` best pairs (ties by
    index, as ``torch.topk`` on CPU), kept where they pass the threshold."""

    top_k: int = 100

    def label_count(self, classes: int) -> int:
        return classes

    def __call__(self, logits, boxes, size, threshold, labels) -> list[Detection]:
        probabilities = 1 / (1 + np.exp(-logits.astype(np.float32)))
        flat = probabilities.reshape(-1)
        order = np.argsort(-flat, kind="stable")[: min(self.top_k, flat.size)]
        scores = flat[order]
        queries, classes = np.divmod(order, logits.shape[-1])
        keep = scores > threshold
        pixel_boxes = corners(boxes, size)[queries]
        return detections(labels, classes[keep], scores[keep], pixel_boxes[keep])


class SigmoidTopQueriesDetections(SigmoidTopKDetections):
    """RT-DETR's rule (also D-FINE's, whose processor is RT-DETR's): Conditional DETR's, with as
    many (query, class) pairs kept as there are queries."""

    def __call__(self, logits, boxes, size, threshold, labels) -> list[Detection]:
        rule = SigmoidTopKDetections(top_k=logits.shape[0])
        return rule(logits, boxes, size, threshold, labels)


@dataclass
class RTDetrProcessor(DetectionProcessor):
    """RT-DETR's image processor: DETR's rules with its own defaults (a fixed 640 x 640
    resize, no normalisation, no padding)."""

    @classmethod
    def from_dict(cls, raw: dict) -> RTDetrProcessor:
        defaults = {"size": {"height": 640, "width": 640}, "do_normalize": False, "do_pad": False}
        return super().from_dict({**defaults, **raw})


def detections(labels, classes, scores, boxes) -> list[Detection]:
    """:class:`Detection` s from parallel arrays (``labels``: the names by class id)."""
    return [
        Detection(labels[int(c)], float(s), tuple(float(v) for v in box))
        for c, s, box in zip(classes, scores, boxes, strict=True)
    ]


#: Each image processor's ``post_process_object_detection`` (what transformers' pipeline calls),
#: by class name without the Fast/Pil suffix.
POST_PROCESSORS = {
    "DetrImageProcessor": SoftmaxDetections(),
    "YolosImageProcessor": SoftmaxDetections(),
    "ConditionalDetrImageProcessor": SigmoidTopKDetections(),
    "DeformableDetrImageProcessor": SigmoidTopKDetections(),
    "RTDetrImageProcessor": SigmoidTopQueriesDetections(),
}


#: Each image processor's pre-processing, by class name without the Fast/Pil suffix.
PRE_PROCESSORS = {
    **{name: DetectionProcessor for name in POST_PROCESSORS},
    "YolosImageProcessor": YolosProcessor,
    "RTDetrImageProcessor": RTDetrProcessor,
}


def detection_processing(raw: dict):
    """``(pre-processor, post-processor)`` of a ``preprocessor_config.json`` dict."""
    name = processor_name(raw)
    if name not in PRE_PROCESSORS or name not in POST_PROCESSORS:
        raise MobiusError(
            f"mobius detect has no image processor like transformers' {name} yet "
            f"(it has {', '.join(sorted(PRE_PROCESSORS))})"
        )
    return PRE_PROCESSORS[name].from_dict(raw), POST_PROCESSORS[name]
