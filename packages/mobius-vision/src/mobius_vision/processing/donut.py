"""Donut's image processing without torch (``DonutImageProcessor``'s steps, in its order).

Optionally turn the image so its long side lies along the target's
(``do_align_long_axis``), resize its shorter side to the target's shorter side, shrink
it to fit the target keeping its ratio (``do_thumbnail``), pad it with black, centred,
to the target size (``do_pad``), then rescale and normalise. The target ``size`` is
``{"height", "width"}``, or a ``[width, height]`` list as older configs write it.
"""

from __future__ import annotations

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._image import (
    BICUBIC,
    BILINEAR,
    ImageSettings,
    flag,
    image_size,
    resize,
    shortest_edge_size,
)


def donut_size(value) -> dict:
    """``size`` as ``{"height", "width"}`` (a list is ``[width, height]``)."""
    if isinstance(value, (list, tuple)) and len(value) == 2:
        value = {"height": value[1], "width": value[0]}
    return value


class DonutPixels:
    """``preprocessor_config.json``'s settings → one ``[3, h, w]`` uint8 image's ``pixel_values``."""

    def __init__(self, settings: dict) -> None:
        settings = dict(settings, size=donut_size(settings.get("size", [1920, 2560])))
        self.image = ImageSettings.from_dict(
            settings, resample=BILINEAR, image_mean=(0.5,) * 3, image_std=(0.5,) * 3
        )
        size = self.image.size
        if "height" not in size or "width" not in size:
            raise MobiusError(f"Donut's size needs height and width: {size}")
        self.target = size["height"], size["width"]
        self.align = flag(settings, "do_align_long_axis", False)
        self.thumbnail = flag(settings, "do_thumbnail", True)
        self.pad = flag(settings, "do_pad", True)

    def __call__(self, image: np.ndarray) -> dict[str, np.ndarray]:
        (height, width), (target_h, target_w) = image_size(image), self.target
        crosswise = (target_w < target_h and width > height) or (
            target_w > target_h and width < height
        )
        if self.align and crosswise:  # a quarter turn clockwise
            image = np.ascontiguousarray(np.rot90(image, 3, axes=(1, 2)))
        if self.image.do_resize:
            edge = min(target_h, target_w)
            image = resize(image, shortest_edge_size(image_size(image), edge), self.image.resample)
        if self.thumbnail:
            image = self.fit(image)
        if self.pad:
            image = self.centre(image)
        return {"pixel_values": self.image.finish(image)[None]}

    def fit(self, image: np.ndarray) -> np.ndarray:
        """Shrunk to fit the target, the ratio kept (the other side truncated)."""
        (height, width), (target_h, target_w) = image_size(image), self.target
        new_h, new_w = min(height, target_h), min(width, target_w)
        if (new_h, new_w) == (height, width):
            return image
        if height > width:
            new_w = int(width * new_h / height)
        elif width > height:
            new_h = int(height * new_w / width)
        return resize(image, (new_h, new_w), self.image.resample or BICUBIC)

    def centre(self, image: np.ndarray) -> np.ndarray:
        """Padded with zeros to the target, centred (the extra row or column at the end)."""
        (height, width), (target_h, target_w) = image_size(image), self.target
        top, left = (target_h - height) // 2, (target_w - width) // 2
        widths = ((0, 0), (top, target_h - height - top), (left, target_w - width - left))
        return np.pad(image, widths, mode="constant", constant_values=0)
