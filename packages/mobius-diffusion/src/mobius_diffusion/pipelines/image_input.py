"""Input images of image-to-image and inpainting, prepared as diffusers' ``VaeImageProcessor``
prepares a PIL image (Pillow and numpy, no torch).

An image is resized with Lanczos to the pipeline's size (by default its own, rounded
down to a multiple of the VAE's scale factor), scaled to [0, 1] and then to [-1, 1]. A
mask is resized the same way, made grayscale, scaled to [0, 1] and binarized at 0.5
(1: repaint, 0: keep); the UNet sees it at latent size, resized nearest as torch's
``interpolate`` does.
"""

from __future__ import annotations

import os

import numpy as np

from mobius.errors import MobiusError


def load_image(image, what: str = "image", rgb: bool = True):
    """A PIL image from a PIL image or a file path; a file is read in RGB (as diffusers'
    ``load_image``), and with ``rgb`` so is any image (the VAE takes three channels).

    Raises:
        MobiusError: a missing or unreadable file, or something that is not an image.
    """
    from PIL import Image, UnidentifiedImageError

    if isinstance(image, (str, os.PathLike)):
        path = os.fspath(image)
        if not os.path.isfile(path):
            raise MobiusError(f"{what} {path}: no such file")
        try:
            with Image.open(path) as opened:
                image = opened.convert("RGB")
        except (OSError, UnidentifiedImageError) as exc:
            raise MobiusError(f"{what} {path} is not a readable image: {exc}") from None
    if not isinstance(image, Image.Image):
        raise MobiusError(
            f"{what} must be a PIL image or an image file, not {type(image).__name__}"
        )
    return image.convert("RGB") if rgb and image.mode != "RGB" else image


def default_size(image, factor: int) -> tuple[int, int]:
    """``(height, width)`` of ``image`` rounded down to multiples of ``factor``."""
    height, width = image.height - image.height % factor, image.width - image.width % factor
    if height < factor or width < factor:
        raise MobiusError(f"an image of {image.width}x{image.height} is smaller than one latent")
    return height, width


def _resized(image, height: int, width: int):
    """The image resized with Lanczos to ``(width, height)`` (diffusers' default resample)."""
    from PIL import Image

    return image.resize((width, height), resample=Image.LANCZOS)


def preprocess_image(image, height: int, width: int) -> np.ndarray:
    """``[1, 3, height, width]`` float32 in [-1, 1]: diffusers' ``VaeImageProcessor.preprocess``."""
    resized = _resized(load_image(image), height, width)
    pixels = np.asarray(resized).astype(np.float32) / 255.0
    return (2.0 * pixels.transpose(2, 0, 1)[None] - 1.0).astype(np.float32)


def preprocess_mask(mask, height: int, width: int) -> np.ndarray:
    """``[1, 1, height, width]`` float32 of 0 (keep) and 1 (repaint): diffusers' mask processor
    (resize in the mask's own mode, then grayscale, [0, 1], binarize at 0.5)."""
    resized = _resized(load_image(mask, "mask image", rgb=False), height, width)
    gray = np.asarray(resized.convert("L")).astype(np.float32) / 255.0
    return (gray >= 0.5).astype(np.float32)[None, None]


def resize_nearest(values: np.ndarray, height: int, width: int) -> np.ndarray:
    """``values`` [batch, channels, H, W] at ``(height, width)``: torch's ``interpolate``
    in ``nearest`` mode (source index ``floor(i * in / out)``)."""

    def sources(size_in: int, size_out: int) -> np.ndarray:
        scale = np.float32(size_in) / np.float32(size_out)
        index = np.floor(np.arange(size_out, dtype=np.float32) * scale).astype(np.int64)
        return np.minimum(index, size_in - 1)

    rows, cols = sources(values.shape[2], height), sources(values.shape[3], width)
    return values[:, :, rows][:, :, :, cols]
