"""Fuyu's image: raw pixel patches in front of the prompt, one token per patch.

What ``FuyuImageProcessor`` (its PIL backend) and ``FuyuProcessor`` do, without torch.
Fuyu takes one image per prompt, always first: the prompt holds no placeholder. The
image shrinks (never grows) to fit ``size``, is padded at the bottom and right to
``size`` with ``padding_value`` (in the uint8 pixels, before rescaling), rescaled and
normalised, then cropped to the patches that cover the unpadded image and cut into
``patch_size`` patches in row order, each flattened as (row, column, channel):
``pixel_values`` ``[patches, patch_h * patch_w * 3]``. The text becomes a row of
``|SPEAKER|`` per patch row, each ended by ``|NEWLINE|``, then ``<s>``, the prompt and
``<0x04>`` (the beginning of the answer), tokenized without the tokenizer's specials
and with the first token of the image part (the sentencepiece ``▁``) dropped.
"""

from __future__ import annotations

import math

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import BILINEAR, flag, number, pad, resize, size_setting

#: FuyuImageProcessor's defaults.
FUYU_DEFAULTS = dict(
    size={"height": 1080, "width": 1920},
    resample=BILINEAR,
    image_mean=(0.5, 0.5, 0.5),
    image_std=(0.5, 0.5, 0.5),
)
#: What FuyuProcessor writes around the image and prompt (fixed, not the tokenizer's).
IMAGE_NEWLINE, BOS, BEGINNING_OF_ANSWER = "|NEWLINE|", "<s>", "<0x04>"


def fit_within(height: int, width: int, target: tuple[int, int]) -> tuple[int, int]:
    """``(height, width)`` scaled down (truncated) to fit ``target``; unchanged if it fits."""
    if height <= target[0] and width <= target[1]:
        return height, width
    scale = min(target[0] / height, target[1] / width)
    return int(height * scale), int(width * scale)


def patch_rows(pixels: np.ndarray, patch: tuple[int, int]) -> np.ndarray:
    """``pixels`` ``[c, h, w]`` as one row per patch in row order, ``[patches, ph * pw * c]``."""
    channels, height, width = pixels.shape
    (ph, pw), rows, columns = patch, height // patch[0], width // patch[1]
    blocks = pixels.reshape(channels, rows, ph, columns, pw).transpose(1, 3, 2, 4, 0)
    return blocks.reshape(rows * columns, ph * pw * channels)


class FuyuProcessor(ImageTextProcessor):
    """FuyuProcessor: one image of raw patches ahead of the prompt."""

    image_defaults = FUYU_DEFAULTS
    image_token = "|SPEAKER|"

    @property
    def patch_size(self) -> tuple[int, int]:
        size = size_setting(self.image.raw.get("patch_size", 30), "patch_size")
        if "height" not in size or "width" not in size:
            raise MobiusError(f"preprocessor setting patch_size needs height and width: {size}")
        return size["height"], size["width"]

    @property
    def canvas(self) -> tuple[int, int]:
        size = self.image.size
        if "height" not in size or "width" not in size:
            raise MobiusError(f"preprocessor setting size needs height and width: {size}")
        return size["height"], size["width"]

    def with_placeholders(self, prompt: str, count: int) -> str:
        """``prompt`` as it is: the processor puts the image in front of it."""
        return prompt

    def patches(self, image: np.ndarray) -> tuple[np.ndarray, int, int]:
        """One ``[3, h, w]`` uint8 image as its patches ``[patches, ph * pw * 3]``, and how
        many rows and columns of patches they make."""
        settings, canvas = self.image, self.canvas
        if settings.do_resize:
            size = fit_within(*image.shape[-2:], canvas)
            if size != image.shape[-2:]:
                image = resize(image, size, settings.resample)
        height, width = image.shape[-2:]
        if flag(settings.raw, "do_pad", True):
            if settings.raw.get("padding_mode", "constant") != "constant":
                raise MobiusError("Fuyu images pad only in padding_mode 'constant'")
            image = pad(image, canvas, number(settings.raw, "padding_value", 1.0))
        pixels = settings.finish(image)
        (ph, pw), (full_h, full_w) = self.patch_size, pixels.shape[-2:]
        height, width = (
            min(full_h, math.ceil(height / ph) * ph),
            min(full_w, math.ceil(width / pw) * pw),
        )
        if height % ph or width % pw:
            raise MobiusError(f"a {height}x{width} image does not divide into {ph}x{pw} patches")
        return patch_rows(pixels[:, :height, :width], (ph, pw)), height // ph, width // pw

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        if self.image_token in text:
            raise MobiusError(
                f"a Fuyu prompt holds no {self.image_token} placeholder: the image goes first"
            )
        if len(images) > 1:
            raise MobiusError(f"Fuyu takes one image per prompt, got {len(images)}")
        if not images:
            return self.tokenize(text)
        pixels, rows, columns = self.patches(self.arrays(images)[0])
        image_text = (self.image_token * columns + IMAGE_NEWLINE) * rows + BOS
        # the image part's first token is the ``▁`` a sentencepiece tokenizer starts with
        ids = self._ids(image_text)[1:] + self._ids(text + BEGINNING_OF_ANSWER)
        ids = np.asarray([ids], dtype=np.int64)
        return {"input_ids": ids, "attention_mask": np.ones_like(ids), "pixel_values": pixels}

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
