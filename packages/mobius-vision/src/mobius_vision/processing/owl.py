"""OWL-ViT's and OWLv2's image processors and their box post-processing, without torch.

:class:`OwlViTProcessor` equals transformers' ``OwlViTImageProcessorPil``: a PIL bicubic
resize to ``size`` (768 x 768), an optional centre crop, rescale, CLIP's normalisation;
boxes are scaled by the image's width and height. :class:`Owlv2Processor` equals
``Owlv2ImageProcessorPil``: rescale, pad at the bottom and right to a square (zeros),
a Gaussian anti-aliased linear resize (scipy's ``ndimage``, as transformers; scipy is
needed for OWLv2 packages only), normalise; boxes are scaled by the longer side, since
they are relative to the padded square.

:func:`query_detections` is transformers' zero-shot-object-detection pipeline's reading
of the logits: each query scored alone (a sigmoid), every patch above the threshold kept
for every query, the boxes ordered by score (ties in query then patch order).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._image import (
    BICUBIC,
    BILINEAR,
    ImageSettings,
    center_crop,
    flag,
    image_size,
    normalize,
    rescale,
)
from mobius_vision.processing.classification import OPENAI_CLIP
from mobius_vision.processing.detection import Detection, corners, processor_name


@dataclass
class OwlViTProcessor:
    """``OwlViTImageProcessorPil`` on one ``[3, h, w]`` uint8 image."""

    settings: ImageSettings

    @classmethod
    def from_dict(cls, raw: dict) -> OwlViTProcessor:
        """The processor a ``preprocessor_config.json`` dict describes (values checked)."""
        mean, std = OPENAI_CLIP
        defaults = dict(size={"height": 768, "width": 768}, image_mean=mean, image_std=std)
        return cls(ImageSettings.from_dict(raw, resample=BICUBIC, **defaults))

    def __call__(self, image: np.ndarray) -> np.ndarray:
        """``pixel_values [3, height, width]`` float32."""
        s = self.settings
        if s.do_resize:
            image = s.resize_to(image)
        if s.do_center_crop and s.crop_size is not None:
            image = center_crop(image, (s.crop_size["height"], s.crop_size["width"]))
        return s.finish(image)

    def box_scale(self, size: tuple[int, int]) -> tuple[int, int]:
        """The ``(height, width)`` the normalised boxes are scaled by: the image's."""
        return size


@dataclass
class Owlv2Processor(OwlViTProcessor):
    """``Owlv2ImageProcessorPil``: padded to a square, then resized with anti-aliasing."""

    do_pad: bool = True

    @classmethod
    def from_dict(cls, raw: dict) -> Owlv2Processor:
        mean, std = OPENAI_CLIP
        defaults = dict(size={"height": 960, "width": 960}, image_mean=mean, image_std=std)
        settings = ImageSettings.from_dict(raw, resample=BILINEAR, **defaults)
        if settings.do_resize and not {"height", "width"} <= set(settings.size):
            raise MobiusError(f"OWLv2's size must give height and width, not {settings.size}")
        return cls(settings, do_pad=flag(raw, "do_pad", True))

    def __call__(self, image: np.ndarray) -> np.ndarray:
        s = self.settings
        if s.do_rescale:
            image = rescale(image, s.rescale_factor)
        if self.do_pad:
            height, width = image_size(image)
            side = max(height, width)
            image = np.pad(image, ((0, 0), (0, side - height), (0, side - width)))
        if s.do_resize:
            image = antialiased_resize(image, (s.size["height"], s.size["width"]))
        if s.do_normalize:
            image = normalize(image, s.image_mean, s.image_std)
        return image.astype(np.float32, copy=False)

    def box_scale(self, size: tuple[int, int]) -> tuple[int, int]:
        """The longer side twice: the boxes are relative to the padded square."""
        side = max(size)
        return side, side


def antialiased_resize(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``image [c, h, w]`` (float) resized to ``size`` as OWLv2's processor does (after
    scikit-image): a Gaussian of sigma ``(factor - 1) / 2`` per axis, a linear zoom on the
    pixel grid (mirror edges), clipped to the input's range."""
    try:
        from scipy import ndimage
    except ImportError:
        raise MobiusError(
            "OWLv2's image processing needs scipy: pip install 'mobius-vision[run]'"
        ) from None
    pixels = np.moveaxis(image, 0, -1)  # [h, w, c], as transformers filters it
    factors = np.divide(pixels.shape, (*size, pixels.shape[-1]))
    sigma = np.maximum(0, (factors - 1) / 2)
    filtered = ndimage.gaussian_filter(pixels, sigma, cval=0, mode="mirror")
    zoomed = ndimage.zoom(filtered, 1 / factors, order=1, mode="mirror", cval=0, grid_mode=True)
    clipped = np.clip(zoomed, pixels.min(), pixels.max())
    return np.moveaxis(clipped, -1, 0)


#: The processors of the zero-shot detectors, by transformers class name (no Fast/Pil suffix).
PROCESSORS = {"OwlViTImageProcessor": OwlViTProcessor, "Owlv2ImageProcessor": Owlv2Processor}


def owl_processor(raw: dict) -> OwlViTProcessor:
    """The processor a ``preprocessor_config.json`` dict names."""
    name = processor_name(raw)
    if name not in PROCESSORS:
        raise MobiusError(
            f"preprocessor_config.json names {name}; zero-shot detection packages take "
            f"{' or '.join(PROCESSORS)}"
        )
    return PROCESSORS[name].from_dict(raw)


def query_detections(
    logits: np.ndarray, boxes: np.ndarray, scale: tuple[int, int], threshold: float, labels
) -> list[Detection]:
    """One image's boxes as the pipeline lists them: ``logits [patches, queries]``,
    ``boxes [patches, 4]`` normalised, ``scale`` the ``(height, width)`` they are relative
    to; each query's patches scoring above ``threshold``, best first."""
    scores = 1 / (1 + np.exp(-logits.astype(np.float32)))
    pixel_boxes = corners(boxes, scale)
    found = [
        Detection(labels[query], float(scores[patch, query]), tuple(map(float, pixel_boxes[patch])))
        for query in range(scores.shape[1])
        for patch in np.flatnonzero(scores[:, query] > threshold)
    ]
    return sorted(found, key=lambda d: d.score, reverse=True)  # stable: ties keep their order
