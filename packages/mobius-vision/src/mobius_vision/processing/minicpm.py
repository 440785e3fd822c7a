"""MiniCPM-V 4.6's and MiniCPM-OCR's images: an overview and, for a large image, slices on a
grid, each sized to whole merge blocks, packed into one row of patches.

As transformers' ``MiniCPMV4_6ImageProcessorPil``: an image over ``scale_resolution^2``
pixels gets the grid (``max_slice_nums`` at most) whose aspect is closest to its own;
the overview is resized to about ``scale_resolution^2`` pixels (small unsliced images
are scaled up to it, unless MiniCPM-OCR's ``small_image_upsize`` is ``"never"``), the slices cut from the image resized to whole slices. Every side
is a multiple of ``patch_size`` times the merge (4 at ``"16x"``, 2 at ``"4x"``). Each
piece is rescaled, normalised and laid out patch by patch; ``target_sizes`` gives each
piece's patch grid.

An image's text is ``<image_id>i</image_id>`` (its index in the prompt, with
``use_image_id``), the overview's tokens between ``<im_start>`` and ``<im_end>``, then
each slice's between ``<slice>`` and ``</slice>``, rows separated by newlines; a piece has
``h * w / 16`` tokens (``/ 4`` at ``"4x"``).
"""

from __future__ import annotations

import math

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import flag, image_size, integer, resize


def ensure_divide(length: float, divisor: int) -> int:
    """``length`` rounded to a multiple of ``divisor`` (at least one)."""
    return max(round(length / divisor) * divisor, divisor)


def sliced_grid(size: tuple[int, int], most: int, resolution: int) -> list[int] | None:
    """``[rows, columns]`` of the slices of an image of ``size``, or None (no slicing)."""
    height, width = size
    log_ratio = math.log(width / height)
    multiple = min(math.ceil(width * height / (resolution * resolution)), most)
    if multiple <= 1:
        return None
    best, least = [1, 1], float("inf")
    for count in (multiple - 1, multiple, multiple + 1):
        if count == 1 or count > most:
            continue
        for rows in range(1, count + 1):
            if count % rows:
                continue
            error = abs(log_ratio - math.log((count // rows) / rows))
            if error < least or (error == least and rows > best[0]):
                best, least = [rows, count // rows], error
    return best


class MiniCPMProcessor(ImageTextProcessor):
    """MiniCPMV4_6Processor (MiniCPMOcrProcessor too) over the PIL image processor."""

    @property
    def image_token(self) -> str:
        return self.token_text("image_token", "<image>")

    @property
    def downsample_mode(self) -> str:
        mode = self.image.raw.get("downsample_mode", self.config_value("downsample_mode", "16x"))
        if mode not in ("16x", "4x"):
            raise MobiusError(f"downsample_mode {mode!r} is not 16x or 4x")
        return mode

    @property
    def patch_size(self) -> int:
        return integer(self.image.raw, "patch_size", 14, 1, 1 << 10)

    def best_size(self, size, resolution: int, upscale: bool) -> tuple[int, int]:
        """The ``(height, width)`` of whole merge blocks near ``size``, scaled to about
        ``resolution^2`` pixels when larger (or when ``upscale``)."""
        height, width = size
        if height * width > resolution * resolution or upscale:
            aspect = width / height
            height = int(resolution / math.sqrt(aspect))
            width = int(height * aspect)
        block = self.patch_size * (2 if self.downsample_mode == "4x" else 4)
        return ensure_divide(height, block), ensure_divide(width, block)

    def upscales(self, grid) -> bool:
        """Whether the overview of an image with ``grid`` is scaled up to the resolution: an
        unsliced one is, unless MiniCPM-OCR's ``small_image_upsize`` says ``"never"``."""
        mode = self.image.raw.get("small_image_upsize", "always")
        if mode not in ("always", "never"):
            raise MobiusError(
                f"small_image_upsize {mode!r}: mobius sizes images 'always' or 'never' (the "
                "adaptive choice needs OpenCV's glyph measure)"
            )
        return grid is None and mode == "always"

    def pieces(self, image: np.ndarray) -> tuple[list[np.ndarray], list[int] | None]:
        """One image's pieces (uint8; the overview, then the slices row by row) and its grid."""
        raw = self.image.raw
        resolution = integer(raw, "scale_resolution", 448, 1, 1 << 14)
        size = image_size(image)
        grid = None
        if flag(raw, "slice_mode", True):
            grid = sliced_grid(size, integer(raw, "max_slice_nums", 9, 1, 1 << 10), resolution)
        resizing = self.image.do_resize
        overview = self.best_size(size, resolution, self.upscales(grid)) if resizing else size
        pieces = [resize(image, overview, self.image.resample) if resizing else image]
        if grid is not None:
            rows, columns = grid
            refine = image
            if resizing:
                cell = (
                    ensure_divide(size[0], rows) / rows,
                    ensure_divide(size[1], columns) / columns,
                )
                h, w = self.best_size(cell, resolution, True)
                refine = resize(image, (h * rows, w * columns), self.image.resample)
            h, w = image_size(refine)
            h, w = h // rows, w // columns
            pieces += [
                refine[:, r : r + h, c : c + w]
                for r in range(0, h * rows, h)
                for c in range(0, w * columns, w)
            ]
        return pieces, grid

    def packed(self, piece: np.ndarray) -> np.ndarray:
        """``[c, h, w]`` as ``[c, patch, h * w / patch]``, patch by patch, row-major."""
        p = self.patch_size
        channels, height, width = piece.shape
        patches = piece.reshape(channels, height // p, p, width // p, p).transpose(0, 2, 1, 3, 4)
        return patches.reshape(channels, p, -1)

    def placeholder(self, index: int, sizes: list[tuple[int, int]], grid) -> str:
        """The text of the ``index``-th image of a prompt, of pieces of patch grids ``sizes``."""
        divisor = 4 if self.downsample_mode == "4x" else 16
        tokens = [h * w // divisor for h, w in sizes]
        text = self.token_text("image_start_token", "<im_start>")
        text += self.image_token * tokens[0] + self.token_text("image_end_token", "<im_end>")
        if grid is not None:
            start = self.token_text("slice_start_token", "<slice>")
            end = self.token_text("slice_end_token", "</slice>")
            rows, columns = grid
            text += "\n".join(
                "".join(start + self.image_token * n + end for n in tokens[r : r + columns])
                for r in range(1, 1 + rows * columns, columns)
            )
        if flag(self.image.raw, "use_image_id", True):
            start = self.token_text("image_id_start_token", "<image_id>")
            text = f"{start}{index}{self.token_text('image_id_end_token', '</image_id>')}{text}"
        return text

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        self.count_placeholders(text, images)
        rows, sizes, expansions = [], [], []
        p = self.patch_size
        for index, image in enumerate(self.arrays(images)):
            pieces, grid = self.pieces(image)
            shapes = [(piece.shape[1] // p, piece.shape[2] // p) for piece in pieces]
            rows += [self.packed(self.image.finish(piece)) for piece in pieces]
            sizes += shapes
            expansions.append(self.placeholder(index, shapes, grid))
        inputs = self.tokenize(self.expand(text, expansions))
        if rows:
            inputs["pixel_values"] = np.concatenate(rows, axis=-1)[None]
            inputs["target_sizes"] = np.asarray(sizes, dtype=np.int64)
        return inputs
