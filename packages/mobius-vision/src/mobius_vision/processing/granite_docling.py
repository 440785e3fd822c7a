"""Granite-Docling's pages: GOT-OCR2 tiles plus a thumbnail, in Idefics3's prompt layout.

``GraniteDoclingImageProcessor`` cuts each page into the grid of ``size`` tiles whose
aspect ratio is closest to the page's (``min_patches`` to ``max_patches`` tiles,
``crop_to_patches``), adds the whole page resized to one tile when there is more than one,
rescales and normalises: ``pixel_values [1, tiles, 3, h, w]`` and ``pixel_attention_mask
[1, tiles]``. The prompt's ``<image>`` becomes, per tile, ``<fake_token_around_image>
<row_r_col_c>`` and ``image_seq_len`` image tokens, a newline after each row, then for a
split page ``\\n<fake_token_around_image><global-img>``, the thumbnail's tokens and a
closing ``<fake_token_around_image>``.

The fine route (``fine_route``: four times the tokens per tile) and the spread rule
(``dense_max_patches``) are not built; settings that ask for them are an error.
"""

from __future__ import annotations

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._image import flag, image_size, integer
from mobius_vision.processing._tiles import GOT_OCR2_DEFAULTS, TiledProcessor

#: GraniteDoclingImageProcessor's defaults.
GRANITE_DOCLING_DEFAULTS = dict(GOT_OCR2_DEFAULTS, size={"height": 512, "width": 512})


class GraniteDoclingProcessor(TiledProcessor):
    """GraniteDoclingProcessor: tiled pages, their tokens laid out as Idefics3 lays them."""

    image_defaults = GRANITE_DOCLING_DEFAULTS
    fake_image_token = "<fake_token_around_image>"
    global_image_token = "<global-img>"

    def __init__(self, tokenizer, image, settings) -> None:
        super().__init__(tokenizer, image, settings)
        self.image_token = self.token_text("image_token", "<image>")
        if flag(image.raw, "fine_route", False):
            raise MobiusError("Granite-Docling's fine route (fine_route) is not built by mobius")
        if integer(image.raw, "dense_max_patches", 0):
            raise MobiusError("Granite-Docling's spread rule (dense_max_patches) is not supported")

    def crops(self) -> bool:
        return flag(self.image.raw, "crop_to_patches", True)

    def patch_range(self) -> tuple[int, int]:
        low = integer(self.image.raw, "min_patches", 1, 1, 1 << 10)
        return low, integer(self.image.raw, "max_patches", 32, low, 1 << 10)

    @property
    def image_seq_len(self) -> int:
        """Image tokens per tile: the processor's setting, else the tower's grid folded by
        ``scale_factor``."""
        vision = self.settings.config.get("vision_config")
        vision = vision if isinstance(vision, dict) else {}
        values = [vision.get(k) for k in ("image_size", "patch_size", "scale_factor")]
        default = 64
        if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
            default = (values[0] // values[1] // values[2]) ** 2
        return integer(self.settings.processor, "image_seq_len", default, 1, 1 << 16)

    def image_text(self, rows: int, columns: int) -> str:
        """What one page's placeholder becomes, for ``rows x columns`` tiles."""
        tokens = self.image_token * self.image_seq_len
        text = ""
        for row in range(rows):
            for column in range(columns):
                text += f"{self.fake_image_token}<row_{row + 1}_col_{column + 1}>{tokens}"
            text += "\n"
        if rows * columns > 1:  # the thumbnail
            fake = self.fake_image_token
            text += f"\n{fake}{self.global_image_token}{tokens}{fake}"
        return text

    def grid_of(self, image: np.ndarray) -> tuple[int, int]:
        """``(rows, columns)`` of the page's tiles."""
        if not (self.crops() and self.patch_range()[1] > 1):
            return 1, 1
        columns, rows = self.grid(image_size(image))
        return rows, columns

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        self.count_placeholders(text, images)
        arrays = self.arrays(images)
        text = self.expand(text, [self.image_text(*self.grid_of(image)) for image in arrays])
        inputs = self.tokenize(text)
        tiles = [self.image.finish(tile) for image in arrays for tile in self.tiles(image)]
        if tiles:
            inputs["pixel_values"] = np.stack(tiles)[None]
            inputs["pixel_attention_mask"] = np.ones((1, len(tiles)), np.int64)
        return inputs
