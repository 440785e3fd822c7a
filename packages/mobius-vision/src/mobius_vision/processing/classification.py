"""The image processors of classifier checkpoints: ``pixel_values`` as transformers' PIL processors make them.

:func:`load_image_processor` reads a package's ``preprocessor_config.json`` and picks
the processor its ``image_processor_type`` names. The plain processors (ViT, DeiT,
BEiT, CLIP, SigLIP, BiT, MobileNet) all resize (to ``height``/``width``, or the
shortest edge), centre-crop where configured, rescale and normalise:
:meth:`ImageSettings.standard <mobius_vision.processing._image.ImageSettings.standard>`.
ConvNeXt's (also ResNet's and RegNet's) resizes by ``crop_pct`` instead
(:class:`CropPctProcessor`). Each family's defaults are its transformers class's, for
the fields a config leaves out. A processor type not listed here is refused, naming
it: its pixels would differ from transformers' silently.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius.generate import _read_json
from mobius_vision.processing._image import (
    BICUBIC,
    BILINEAR,
    ImageSettings,
    _pil,
    center_crop,
    image_size,
    resize,
    shortest_edge_size,
    to_chw,
)

#: The (mean, std) pairs of transformers' image_utils.
IMAGENET_STANDARD = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
OPENAI_CLIP = (
    (0.48145466, 0.4578275, 0.40821073),
    (0.26862954, 0.26130258, 0.27577711),
)


@dataclass
class ClassifierProcessor:
    """Resize, centre crop (where configured), rescale, normalise: one image's ``[3, h, w]`` floats."""

    settings: ImageSettings

    @classmethod
    def from_settings(cls, settings: ImageSettings) -> ClassifierProcessor:
        """The processor of checked settings (a family reads its own fields from ``settings.raw``)."""
        return cls(settings)

    def __call__(self, image) -> np.ndarray:
        """``image`` (a path, a PIL image or a uint8 array) as float32 ``[3, height, width]``."""
        return self.settings.standard(_pixels(image))


@dataclass
class CropPctProcessor(ClassifierProcessor):
    """ConvNeXt's resize: below 384 pixels, the shortest edge to ``edge / crop_pct``, then the
    centre ``edge`` square; from 384 up, a warp to the square."""

    crop_pct: float = 224 / 256

    @classmethod
    def from_settings(cls, settings: ImageSettings) -> CropPctProcessor:
        crop_pct = settings.raw.get("crop_pct")
        if crop_pct is None:
            return cls(settings)
        if not isinstance(crop_pct, (int, float)) or isinstance(crop_pct, bool):
            raise MobiusError(f"preprocessor setting crop_pct must be a number, got {crop_pct!r}")
        if not (math.isfinite(crop_pct) and 0 < crop_pct <= 1):
            raise MobiusError(f"preprocessor setting crop_pct must be in (0, 1], got {crop_pct}")
        return cls(settings, float(crop_pct))

    def __call__(self, image) -> np.ndarray:
        settings = self.settings
        image = _pixels(image)
        if settings.do_resize:
            edge = settings.size.get("shortest_edge")
            if edge is None:
                raise MobiusError(
                    f"a crop_pct resize needs size.shortest_edge, not {settings.size}"
                )
            if edge < 384:
                target = shortest_edge_size(image_size(image), int(edge / self.crop_pct))
                image = center_crop(resize(image, target, settings.resample), (edge, edge))
            else:
                image = resize(image, (edge, edge), settings.resample)
        if settings.do_center_crop and settings.crop_size is not None:
            image = center_crop(image, (settings.crop_size["height"], settings.crop_size["width"]))
        return settings.finish(image)


@dataclass(frozen=True)
class Family:
    """A transformers image processor class: its class defaults and how it processes."""

    resample: int
    size: dict
    crop_size: dict | None = None
    do_center_crop: bool = False
    mean_std: tuple = IMAGENET_STANDARD
    #: How the class reads a lone int ``size``: a square, or the shortest edge.
    square: bool = True
    processor: type[ClassifierProcessor] = ClassifierProcessor

    def defaults(self) -> dict:
        """The :class:`ImageSettings` fields a ``preprocessor_config.json`` may leave out."""
        return dict(
            resample=self.resample,
            size=self.size,
            crop_size=self.crop_size,
            do_center_crop=self.do_center_crop,
            image_mean=self.mean_std[0],
            image_std=self.mean_std[1],
        )


_SQUARE_224 = {"height": 224, "width": 224}
#: Resize the shortest edge, then crop the centre square (CLIP, BiT, MobileNet).
_EDGE_THEN_CROP = dict(crop_size=_SQUARE_224, do_center_crop=True, square=False)

#: transformers image processor classes (``image_processor_type``, no Pil/Fast suffix).
FAMILIES = {
    "ViTImageProcessor": Family(BILINEAR, _SQUARE_224),
    "DeiTImageProcessor": Family(
        BICUBIC, {"height": 256, "width": 256}, _SQUARE_224, do_center_crop=True
    ),
    "BeitImageProcessor": Family(BICUBIC, _SQUARE_224, _SQUARE_224),
    "CLIPImageProcessor": Family(
        BICUBIC, {"shortest_edge": 224}, mean_std=OPENAI_CLIP, **_EDGE_THEN_CROP
    ),
    "BitImageProcessor": Family(
        BICUBIC, {"shortest_edge": 224}, mean_std=OPENAI_CLIP, **_EDGE_THEN_CROP
    ),
    "MobileNetV1ImageProcessor": Family(BILINEAR, {"shortest_edge": 256}, **_EDGE_THEN_CROP),
    "MobileNetV2ImageProcessor": Family(BILINEAR, {"shortest_edge": 256}, **_EDGE_THEN_CROP),
    "SiglipImageProcessor": Family(BICUBIC, _SQUARE_224, square=False),
    "ConvNextImageProcessor": Family(
        BICUBIC, {"shortest_edge": 384}, square=False, processor=CropPctProcessor
    ),
}


def processor_type(settings: dict) -> str:
    """The transformers class a ``preprocessor_config.json`` names, as its slow image processor.

    ``ViTFeatureExtractor`` (older checkpoints), ``ViTImageProcessorFast`` and
    ``ViTImageProcessorPil`` all read as ``ViTImageProcessor``.
    """
    name = settings.get("image_processor_type") or settings.get("feature_extractor_type")
    if not isinstance(name, str) or not name:
        raise MobiusError("preprocessor_config.json names no image_processor_type")
    for suffix in ("Fast", "Pil"):
        name = name.removesuffix(suffix)
    return name.replace("FeatureExtractor", "ImageProcessor")


def image_processor(settings: dict) -> ClassifierProcessor:
    """The processor a ``preprocessor_config.json`` dict describes (values checked)."""
    name = processor_type(settings)
    family = FAMILIES.get(name)
    if family is None:
        raise MobiusError(
            f"mobius classify has no image processor like transformers' {name} yet "
            f"(it has {', '.join(sorted(FAMILIES))})"
        )
    settings = dict(settings)
    size = settings.get("size")
    if isinstance(size, int) and not isinstance(size, bool) and not family.square:
        settings["size"] = {"shortest_edge": size}  # as transformers' get_size_dict reads it
    return family.processor.from_settings(ImageSettings.from_dict(settings, **family.defaults()))


def load_image_processor(package_dir) -> ClassifierProcessor:
    """The image processor of a built package (its copied ``preprocessor_config.json``)."""
    path = Path(package_dir) / "preprocessor_config.json"
    if not path.is_file():
        raise MobiusError(
            f"no preprocessor_config.json in {package_dir}: build from a checkpoint that has "
            "its image processor"
        )
    return image_processor(_read_json(path))


def load_image(path) -> PIL.Image.Image:  # noqa: F821 (PIL is imported lazily)
    """The image file at ``path`` as transformers' pipelines load it (``load_image``): turned
    upright by its EXIF orientation, then converted to RGB, any alpha channel dropped.

    :func:`~mobius_vision.processing._image.open_image` composites transparency onto white
    and keeps the stored orientation; the pipelines' scores are the reference here.
    """
    Image = _pil()
    from PIL import ImageOps

    path = Path(path)
    if not path.is_file():
        raise MobiusError(f"no image file at {path}")
    try:
        with Image.open(path) as image:
            return ImageOps.exif_transpose(image).convert("RGB")
    except (OSError, ValueError, Image.DecompressionBombError) as exc:  # not an image, truncated
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MobiusError(f"cannot read {path} as an image: {reason}") from None


def _pixels(image) -> np.ndarray:
    """A path, PIL image or array as ``[3, h, w]`` uint8 RGB."""
    if isinstance(image, (str, os.PathLike)):
        image = load_image(image)
    return to_chw(image)
