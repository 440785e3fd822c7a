"""The torch-free image operations every family's processor is made of.

Stable interface (the family modules of :mod:`mobius_vision.processing` use these names):

- :func:`open_image` (a file -> RGB ``PIL.Image``; a missing or unreadable file is a
  one-line :class:`~mobius.errors.MobiusError`), :func:`to_chw` (PIL or numpy image ->
  ``[3, height, width]`` uint8, transparency composited onto white);
- :func:`resize` (through PIL with the config's ``resample``, exactly as transformers'
  image processors resize), :func:`shortest_edge_size` (the size a ``shortest_edge``
  resize gives), :func:`center_crop`, :func:`pad` (bottom and right),
  :func:`pad_to_square` (centred on a colour),
  :func:`rescale`, :func:`normalize`;
- :class:`ImageSettings`: the standard fields of ``preprocessor_config.json`` (checked
  types), with :meth:`ImageSettings.resize_to`, :meth:`ImageSettings.finish`
  (rescale + normalise) and :meth:`ImageSettings.standard` (resize, crop, rescale,
  normalise: CLIP's pipeline).

Images stay ``[channels, height, width]`` uint8 through the geometric steps and
become float32 at :func:`rescale`, with transformers' arithmetic (float64 product cast
to float32, then float32 normalisation), so the pixels equal theirs bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError

#: PIL's resampling filters by the number transformers writes as ``resample``.
RESAMPLE_NAMES = {0: "NEAREST", 1: "LANCZOS", 2: "BILINEAR", 3: "BICUBIC", 4: "BOX", 5: "HAMMING"}
BILINEAR, BICUBIC = 2, 3


def _pil():
    try:
        import PIL.Image
    except ImportError:
        raise MobiusError(
            "images need Pillow: pip install mobius-vision[run] (or pip install pillow)"
        ) from None
    return PIL.Image


def open_image(path) -> PIL.Image.Image:  # noqa: F821 (PIL is imported lazily)
    """The image file at ``path``, decoded and converted to RGB (transparency onto white)."""
    Image = _pil()
    path = Path(path)
    if not path.is_file():
        raise MobiusError(f"no image file at {path}")
    try:
        with Image.open(path) as image:
            image.load()
            return _rgb(image)
    except (OSError, ValueError, Image.DecompressionBombError) as exc:  # not an image, truncated
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MobiusError(f"cannot read {path} as an image: {reason}") from None


def _rgb(image):
    """RGB, with any transparency composited onto white (as transformers' convert_to_rgb)."""
    Image = _pil()
    if "A" in image.getbands() or image.info.get("transparency") is not None:
        image = image.convert("RGBA")
        white = Image.new("RGBA", image.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, image).convert("RGB")
    return image.convert("RGB")


def to_chw(image) -> np.ndarray:
    """A PIL image or a numpy image (``[h, w, c]`` or ``[c, h, w]``, 1, 3 or 4 channels) as
    ``[3, height, width]`` uint8 RGB."""
    if not isinstance(image, np.ndarray):
        return np.moveaxis(np.asarray(_rgb(image)), -1, 0)
    if image.ndim == 2:
        image = image[None]
    if image.ndim != 3:
        raise MobiusError(f"an image array needs 2 or 3 dimensions, got shape {image.shape}")
    if image.shape[0] not in (1, 3, 4):  # channels last, as transformers infers it
        if image.shape[-1] not in (1, 3, 4):
            raise MobiusError(f"cannot tell the channels of an image of shape {image.shape}")
        image = np.moveaxis(image, -1, 0)
    if image.dtype != np.uint8:
        raise MobiusError(f"image arrays must be uint8, got {image.dtype}")
    if image.shape[0] == 1:
        return np.repeat(image, 3, axis=0)
    if image.shape[0] == 4:  # alpha onto white, rounded as transformers does
        alpha = image[3:4] / 255
        return np.round(alpha * image[:3] + (1 - alpha) * 255).astype(np.uint8)
    return image


def image_size(image: np.ndarray) -> tuple[int, int]:
    """``(height, width)`` of a ``[c, h, w]`` image."""
    return int(image.shape[-2]), int(image.shape[-1])


def resize(image: np.ndarray, size: tuple[int, int], resample: int = BICUBIC) -> np.ndarray:
    """``image`` ``[c, h, w]`` resized to ``size`` ``(height, width)`` through PIL.

    uint8 images go through PIL as they are. A float image in [0, 1] is scaled to
    uint8 for PIL and back, as transformers does (values truncated, not rounded).
    """
    Image = _pil()
    height, width = size
    scaled = image.dtype != np.uint8
    pixels = np.moveaxis(image, 0, -1)
    if scaled:
        pixels = (pixels.astype(np.float64) * 255).astype(np.float32)
    pixels = pixels.astype(np.uint8)
    pil = Image.fromarray(pixels[..., 0] if pixels.shape[-1] == 1 else pixels)
    out = np.asarray(pil.resize((width, height), resample=Image.Resampling(resample)))
    out = np.moveaxis(out[..., None] if out.ndim == 2 else out, -1, 0)
    return rescale(out, 1 / 255) if scaled else out


def shortest_edge_size(size: tuple[int, int], edge: int) -> tuple[int, int]:
    """``(height, width)`` with the shorter side ``edge`` and the ratio kept (the longer
    side truncated), as a ``{"shortest_edge": edge}`` resize gives."""
    height, width = size
    short, long = (width, height) if width <= height else (height, width)
    new_long = int(edge * long / short)
    return (new_long, edge) if width <= height else (edge, new_long)


def center_crop(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """The centre ``size`` of ``image`` (``[c, h, w]``), zero-padded where it is smaller."""
    crop_h, crop_w = size
    height, width = image_size(image)
    if crop_h > height or crop_w > width:  # pad to at least the crop, centred (ceil before)
        new_h, new_w = max(crop_h, height), max(crop_w, width)
        canvas = np.zeros((*image.shape[:-2], new_h, new_w), dtype=image.dtype)
        top, left = math.ceil((new_h - height) / 2), math.ceil((new_w - width) / 2)
        canvas[..., top : top + height, left : left + width] = image
        image, height, width = canvas, new_h, new_w
    top, left = (height - crop_h) // 2, (width - crop_w) // 2
    return image[..., top : top + crop_h, left : left + crop_w]


def pad(image: np.ndarray, size: tuple[int, int], fill=0) -> np.ndarray:
    """``image`` ``[c, h, w]`` padded at the bottom and right to ``size`` with ``fill``."""
    height, width = image_size(image)
    if size[0] < height or size[1] < width:
        raise ValueError(f"cannot pad an image of {(height, width)} to {size}")
    widths = ((0, 0), (0, size[0] - height), (0, size[1] - width))
    return np.pad(image, widths, mode="constant", constant_values=fill)


def pad_to_square(image: np.ndarray, colour: tuple[int, ...]) -> np.ndarray:
    """``image`` ``[c, h, w]`` centred on a square of ``colour``."""
    channels, height, width = image.shape
    if height == width:
        return image
    side = max(height, width)
    square = np.empty((channels, side, side), dtype=image.dtype)
    square[:] = np.asarray(colour, dtype=image.dtype)[:, None, None]
    top, left = (side - height) // 2, (side - width) // 2
    square[:, top : top + height, left : left + width] = image
    return square


def rescale(image: np.ndarray, factor: float) -> np.ndarray:
    """``image * factor`` as float32 (computed in float64, as transformers does)."""
    return (image.astype(np.float64) * factor).astype(np.float32)


def normalize(image: np.ndarray, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """``(image - mean) / std`` per channel of ``[c, h, w]``, in float32."""
    image = image if np.issubdtype(image.dtype, np.floating) else image.astype(np.float32)
    mean = np.asarray(mean, dtype=image.dtype)[:, None, None]
    std = np.asarray(std, dtype=image.dtype)[:, None, None]
    return (image - mean) / std


# --- preprocessor_config.json -----------------------------------------------------------


def _number_list(value, name: str, default) -> tuple[float, ...]:
    if value is None:
        return tuple(default)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value] * 3
    if (
        not isinstance(value, list)
        or len(value) != 3
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    ):
        raise MobiusError(f"preprocessor setting {name} must be 3 numbers, got {value!r}")
    return tuple(float(v) for v in value)


def size_setting(value, name: str = "size") -> dict[str, int]:
    """A ``size``-like setting checked: a dict of positive ints (``height``/``width``,
    ``shortest_edge``, ``longest_edge``...), or one int (a square)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = {"height": value, "width": value}
    if not isinstance(value, dict) or not value:
        raise MobiusError(f"preprocessor setting {name} must be a dict of sizes, got {value!r}")
    for key, number in value.items():
        if not isinstance(number, int) or isinstance(number, bool) or not 0 < number < 1 << 16:
            raise MobiusError(f"preprocessor setting {name}.{key} must be a positive int")
    return dict(value)


def flag(settings: dict, name: str, default: bool) -> bool:
    """A boolean setting, checked."""
    value = settings.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise MobiusError(f"preprocessor setting {name} must be true or false, got {value!r}")
    return value


def number(settings: dict, name: str, default: float) -> float:
    """A finite number setting, checked."""
    value = settings.get(name, default)
    if value is None:
        return default
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise MobiusError(f"preprocessor setting {name} must be a number, got {value!r}")
    return float(value)


def integer(settings: dict, name: str, default: int | None, low: int = 0, high: int = 1 << 20):
    """An int setting in ``[low, high]``, checked (``default`` where it is absent or null)."""
    value = settings.get(name, default)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise MobiusError(f"setting {name} must be an int in [{low}, {high}], got {value!r}")
    return value


@dataclass
class ImageSettings:
    """The fields of ``preprocessor_config.json`` most image processors share.

    The defaults are transformers' base image processor's; ``raw`` keeps the whole
    dict for a family's own fields (read them with :func:`flag`, :func:`integer`...).
    """

    do_resize: bool = True
    size: dict = field(default_factory=lambda: {"height": 224, "width": 224})
    resample: int = BICUBIC
    do_center_crop: bool = False
    crop_size: dict | None = None
    do_rescale: bool = True
    rescale_factor: float = 1 / 255
    do_normalize: bool = True
    image_mean: tuple = (0.5, 0.5, 0.5)
    image_std: tuple = (0.5, 0.5, 0.5)
    raw: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, settings: dict, **defaults) -> ImageSettings:
        """The settings of a ``preprocessor_config.json`` dict, checked; ``defaults`` are
        the family's own defaults for fields the dict lacks."""
        base = cls(**defaults)
        resample = integer(settings, "resample", base.resample, 0, 5)
        crop = settings.get("crop_size", base.crop_size)
        return cls(
            do_resize=flag(settings, "do_resize", base.do_resize),
            size=size_setting(settings.get("size", base.size)),
            resample=resample,
            do_center_crop=flag(settings, "do_center_crop", base.do_center_crop),
            crop_size=None if crop is None else size_setting(crop, "crop_size"),
            do_rescale=flag(settings, "do_rescale", base.do_rescale),
            rescale_factor=number(settings, "rescale_factor", base.rescale_factor),
            do_normalize=flag(settings, "do_normalize", base.do_normalize),
            image_mean=_number_list(settings.get("image_mean"), "image_mean", base.image_mean),
            image_std=_number_list(settings.get("image_std"), "image_std", base.image_std),
            raw=dict(settings),
        )

    def resize_to(self, image: np.ndarray, size: dict | None = None) -> np.ndarray:
        """``image`` resized as ``size`` (default: :attr:`size`) says: ``height`` and
        ``width``, or ``shortest_edge``."""
        size = self.size if size is None else size
        if "shortest_edge" in size and "longest_edge" not in size:
            target = shortest_edge_size(image_size(image), size["shortest_edge"])
        elif "height" in size and "width" in size:
            target = (size["height"], size["width"])
        else:
            raise MobiusError(f"unsupported resize setting {size}")
        return resize(image, target, self.resample)

    def finish(self, image: np.ndarray) -> np.ndarray:
        """Rescale and normalise as configured: the float32 pixels."""
        if self.do_rescale:
            image = rescale(image, self.rescale_factor)
        if self.do_normalize:
            image = normalize(image, self.image_mean, self.image_std)
        return image.astype(np.float32, copy=False)

    def standard(self, image: np.ndarray) -> np.ndarray:
        """The usual pipeline on one ``[3, h, w]`` uint8 image: resize, centre crop,
        rescale, normalise."""
        if self.do_resize:
            image = self.resize_to(image)
        if self.do_center_crop and self.crop_size is not None:
            image = center_crop(image, (self.crop_size["height"], self.crop_size["width"]))
        return self.finish(image)
