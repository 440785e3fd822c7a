"""Idefics3 and SmolVLM images: tiles of the tower's size plus a global view, and their tokens.

What ``Idefics3ImageProcessor`` (its PIL backend; SmolVLM's is the same code) and the
two processors do, without torch. Each image is resized so its longest edge is
``size["longest_edge"]`` (the other side made even), then, with ``do_image_splitting``,
up to multiples of the tile size (``max_image_size["longest_edge"]``) and cut into
``rows x columns`` tiles, followed by the whole image squeezed to one tile; an image no
larger than a tile stays one frame. Without splitting each image is squeezed to one
tile. Frames are rescaled, normalised and zero-padded to the largest frame:
``pixel_values`` ``[1, frames, 3, size, size]`` with ``pixel_attention_mask`` marking the
real pixels. The prompt's ``<image>`` becomes, per tile,
``<fake_token_around_image><row_r_col_c>`` and ``image_seq_len`` image tokens, a newline
after each row of tiles, then ``\\n<fake_token_around_image><global-img>``, the global
view's tokens and a closing ``<fake_token_around_image>``.
"""

from __future__ import annotations

import math

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import flag, integer, pad, resize, size_setting

#: Idefics3ImageProcessor's cap on any side after the first resize.
MAX_IMAGE_SIDE = 4096
LANCZOS = 1
#: Idefics3ImageProcessor's defaults.
IDEFICS3_DEFAULTS = dict(
    size={"longest_edge": 4 * 364},
    resample=LANCZOS,
    image_mean=(0.5, 0.5, 0.5),
    image_std=(0.5, 0.5, 0.5),
)


def longest_edge_size(height: int, width: int, longest: int) -> tuple[int, int]:
    """``(height, width)`` with the longer side ``longest``, the other scaled and rounded up
    to even, then both kept under :data:`MAX_IMAGE_SIDE`."""
    ratio = width / height
    if width >= height:
        width, height = longest, int(longest / ratio)
        height += height % 2
    else:
        height, width = longest, int(longest * ratio)
        width += width % 2
    height, width = max(height, 1), max(width, 1)
    ratio = width / height
    if width >= height and width > MAX_IMAGE_SIDE:
        width, height = MAX_IMAGE_SIDE, int(MAX_IMAGE_SIDE / ratio)
    elif height > width and height > MAX_IMAGE_SIDE:
        height, width = MAX_IMAGE_SIDE, int(MAX_IMAGE_SIDE * ratio)
    return max(height, 1), max(width, 1)


def tile_multiple_size(height: int, width: int, tile: int) -> tuple[int, int]:
    """``(height, width)`` rounded up to multiples of ``tile``, the shorter side derived
    from the longer one's new length and the aspect ratio."""
    ratio = width / height
    if width >= height:
        width = math.ceil(width / tile) * tile
        height = math.ceil(int(width / ratio) / tile) * tile
    else:
        height = math.ceil(height / tile) * tile
        width = math.ceil(int(height * ratio) / tile) * tile
    return height, width


class Idefics3Processor(ImageTextProcessor):
    """Idefics3Processor: tiled images, their tokens named as Idefics3 fixes them."""

    image_defaults = IDEFICS3_DEFAULTS
    #: The processor's default tokens per tile when neither its settings nor the config say.
    default_image_seq_len = 169

    # The prompt's tokens: fixed in Idefics3Processor (SmolVLM reads them off the tokenizer).
    image_token = "<image>"
    fake_image_token = "<fake_token_around_image>"
    global_image_token = "<global-img>"

    @property
    def tile_size(self) -> int:
        default = {"longest_edge": 364}
        size = size_setting(self.image.raw.get("max_image_size", default), "max_image_size")
        if "longest_edge" not in size:
            raise MobiusError(f"preprocessor setting max_image_size needs longest_edge: {size}")
        return size["longest_edge"]

    @property
    def image_seq_len(self) -> int:
        """Image tokens per tile: the processor's setting, else what the config gives
        (``(image_size / patch_size)^2 / scale_factor^2``)."""
        default = self.default_image_seq_len
        vision = self.settings.config.get("vision_config")
        if isinstance(vision, dict):
            sizes = [vision.get("image_size"), vision.get("patch_size")]
            scale = self.settings.config.get("scale_factor", 2)
            if all(isinstance(v, int) and v > 0 for v in [*sizes, scale]):
                default = int((sizes[0] // sizes[1]) ** 2 / scale**2)
        return integer(self.settings.processor, "image_seq_len", default, 1, 1 << 16)

    def frames(self, image: np.ndarray) -> tuple[list[np.ndarray], int, int]:
        """One ``[3, h, w]`` uint8 image as its frames (tiles, then the global view) and
        its ``(rows, columns)`` of tiles (``(0, 0)``: not split)."""
        settings, tile = self.image, self.tile_size
        if settings.do_resize:
            size = settings.size
            if "longest_edge" in size:
                target = longest_edge_size(*image.shape[-2:], size["longest_edge"])
            elif "height" in size and "width" in size:
                target = (size["height"], size["width"])
            else:
                raise MobiusError(f"unsupported resize setting {size}")
            image = resize(image, target, settings.resample)
        if not flag(settings.raw, "do_image_splitting", True):
            return [resize(image, (tile, tile), settings.resample)], 0, 0
        image = resize(image, tile_multiple_size(*image.shape[-2:], tile), settings.resample)
        height, width = image.shape[-2:]
        if height <= tile and width <= tile:
            return [image], 0, 0
        rows, columns = height // tile, width // tile
        tiles = [
            image[:, r * tile : (r + 1) * tile, c * tile : (c + 1) * tile]
            for r in range(rows)
            for c in range(columns)
        ]
        return [*tiles, resize(image, (tile, tile), settings.resample)], rows, columns

    def image_text(self, rows: int, columns: int) -> str:
        """What one image's placeholder becomes, for ``rows x columns`` tiles."""
        tokens = self.image_token * self.image_seq_len
        text = ""
        for row in range(rows):
            for column in range(columns):
                text += f"{self.fake_image_token}<row_{row + 1}_col_{column + 1}>{tokens}"
            text += "\n"
        if rows or columns:
            text += "\n"
        return (
            text
            + f"{self.fake_image_token}{self.global_image_token}{tokens}{self.fake_image_token}"
        )

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        self.count_placeholders(text, images)
        frames, expansions = [], []
        for image in self.arrays(images):
            image_frames, rows, columns = self.frames(image)
            frames += [self.image.finish(frame) for frame in image_frames]
            expansions.append(self.image_text(rows, columns))
        inputs = self.tokenize(self.expand(text, expansions))
        if not frames:
            return inputs
        if not flag(self.image.raw, "do_pad", True):
            if len({frame.shape for frame in frames}) > 1:
                raise MobiusError(
                    "frames of different sizes need do_pad in the preprocessor settings"
                )
            inputs["pixel_values"] = np.stack(frames)[None]
            return inputs
        size = (max(f.shape[-2] for f in frames), max(f.shape[-1] for f in frames))
        masks = np.zeros((1, len(frames), *size), dtype=np.int64)
        for index, frame in enumerate(frames):
            masks[0, index, : frame.shape[-2], : frame.shape[-1]] = 1
        inputs["pixel_values"] = np.stack([pad(frame, size) for frame in frames])[None]
        inputs["pixel_attention_mask"] = masks
        return inputs


class SmolVLMProcessor(Idefics3Processor):
    """SmolVLMProcessor: Idefics3's images and layout, its tokens named by the tokenizer."""

    @property
    def image_token(self) -> str:
        return self.token_text("image_token", "<image>")

    @property
    def fake_image_token(self) -> str:
        return self.token_text("fake_image_token", "<fake_token_around_image>")

    @property
    def global_image_token(self) -> str:
        return self.token_text("global_image_token", "<global-img>")
