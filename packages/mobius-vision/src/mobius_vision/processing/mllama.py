"""Mllama's (Llama 3.2 Vision's) images: tiles on the best canvas, and which tokens see them.

What ``MllamaImageProcessor`` (its PIL backend) and ``MllamaProcessor`` do, without
torch. Each image picks the canvas of whole ``size`` tiles (at most ``max_image_tiles``)
that needs the least upscaling, or else the least downscaling (the smaller canvas on
ties), is resized to fit it with its ratio kept, zero-padded at the bottom and right,
rescaled, normalised and cut into tiles: ``pixel_values`` ``[1, images, max_tiles, 3,
tile, tile]`` (missing tiles zero), ``aspect_ratio_ids`` (the canvas's index among the
supported tile layouts, from 1) and ``aspect_ratio_mask`` (the real tiles; the first is
always on). The prompt keeps its ``<|image|>`` tokens (the decoder cross-attends to the
images instead of embedding them); the BOS goes after any leading ones, and
``cross_attention_mask`` ``[1, sequence, images, max_tiles]`` lets each token see the
tiles of the last image before it (consecutive images together).
"""

from __future__ import annotations

import math

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import BILINEAR, integer, pad, resize

#: MllamaImageProcessor's defaults.
MLLAMA_DEFAULTS = dict(
    size={"height": 224, "width": 224},
    resample=BILINEAR,
    image_mean=(0.5, 0.5, 0.5),
    image_std=(0.5, 0.5, 0.5),
)


def tile_layouts(max_tiles: int) -> list[tuple[int, int]]:
    """Every ``(a, b)`` with ``a * b <= max_tiles``, in transformers' order: the canvases an
    image may take (read as (rows, columns)), and the aspect ratio ids (index + 1)."""
    return [
        (a, b)
        for a in range(1, max_tiles + 1)
        for b in range(1, max_tiles + 1)
        if a * b <= max_tiles
    ]


def best_canvas(height: int, width: int, max_tiles: int, tile: int) -> tuple[int, int]:
    """The ``(height, width)`` canvas of whole tiles an image of ``height x width`` goes on:
    the smallest upscale if any canvas needs one, else the largest downscale; the
    smaller area among equals."""
    canvases = [(rows * tile, columns * tile) for rows, columns in tile_layouts(max_tiles)]
    scales = [min(h / height, w / width) for h, w in canvases]
    up = [s for s in scales if s >= 1]
    chosen = min(up) if up else max(scales)
    fitting = [c for c, s in zip(canvases, scales, strict=True) if s == chosen]
    return min(fitting, key=lambda c: c[0] * c[1])


def fit_to_canvas(height: int, width: int, canvas: tuple[int, int], tile: int) -> tuple[int, int]:
    """The size an image takes on ``canvas``: each side clipped to ``[tile, canvas side]``,
    then the ratio kept along the side that scales least."""
    target_h = min(max(height, tile), canvas[0])
    target_w = min(max(width, tile), canvas[1])
    scale_h, scale_w = target_h / height, target_w / width
    if scale_w < scale_h:
        return min(math.floor(height * scale_w) or 1, target_h), target_w
    return target_h, min(math.floor(width * scale_h) or 1, target_w)


def cross_attention_mask(
    input_ids: list[int], image_token_id: int, tiles: list[int], max_tiles: int
) -> np.ndarray:
    """``[1, sequence, images, max_tiles]``: from each ``<|image|>`` to the next one (the
    last to the end; consecutive images all reach the end of the run after them), the
    tokens see that image's ``tiles``."""
    where = [i for i, token in enumerate(input_ids) if token == image_token_id]
    spans = [[start, end] for start, end in zip(where, [*where[1:], len(input_ids)], strict=True)]
    reach = len(input_ids)
    for span in reversed(spans):  # an image right before another sees what that one sees
        if span[1] == span[0] + 1:
            span[1] = reach
        reach = span[1]
    mask = np.zeros((1, len(input_ids), len(tiles), max_tiles), dtype=np.int64)
    for index, ((start, end), count) in enumerate(zip(spans, tiles, strict=False)):
        mask[0, start:end, index, :count] = 1
    return mask


class MllamaProcessor(ImageTextProcessor):
    """MllamaProcessor: tiled images a cross-attending decoder reads."""

    image_defaults = MLLAMA_DEFAULTS

    @property
    def image_token(self) -> str:
        return self.token_text("image_token", "<|image|>")

    @property
    def max_tiles(self) -> int:
        return integer(self.image.raw, "max_image_tiles", 4, 1, 64)

    @property
    def tile_size(self) -> int:
        size = self.image.size
        if size.get("height") is None or size.get("height") != size.get("width"):
            raise MobiusError(f"Mllama's preprocessor size must be a square tile, got {size}")
        return size["height"]

    def with_placeholders(self, prompt: str, count: int) -> str:
        """``prompt`` after one ``<|image|>`` per image, as Mllama prompts start."""
        return (
            prompt
            if count == 0 or self.image_token in prompt
            else self.image_token * count + prompt
        )

    def with_bos(self, text: str) -> str:
        """``text`` with the BOS after its leading image tokens, unless it holds one."""
        bos = self.tokenizer.bos_token
        if not bos or bos in text:
            return text
        leading = 0
        while text.startswith(self.image_token):
            text, leading = text[len(self.image_token) :], leading + 1
        return self.image_token * leading + bos + text

    def tiles(self, image: np.ndarray) -> tuple[np.ndarray, tuple[int, int]]:
        """One ``[3, h, w]`` uint8 image as its tiles ``[tiles, 3, tile, tile]`` and their
        ``(rows, columns)``."""
        tile = self.tile_size
        canvas = best_canvas(*image.shape[-2:], self.max_tiles, tile)
        image = resize(image, fit_to_canvas(*image.shape[-2:], canvas, tile), self.image.resample)
        pixels = self.image.finish(pad(image, canvas))
        rows, columns = canvas[0] // tile, canvas[1] // tile
        tiles = pixels.reshape(3, rows, tile, columns, tile).transpose(1, 3, 0, 2, 4)
        return tiles.reshape(rows * columns, 3, tile, tile), (rows, columns)

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        self.count_placeholders(text, images)
        inputs = self.tokenize(self.with_bos(text))
        if not images:
            return inputs
        max_tiles, layouts = self.max_tiles, tile_layouts(self.max_tiles)
        tiled = [self.tiles(image) for image in self.arrays(images)]
        counts = [len(tiles) for tiles, _ in tiled]
        image_token_id = self.token_id(self.image_token)
        ids = inputs["input_ids"][0].tolist()
        inputs["cross_attention_mask"] = cross_attention_mask(
            ids, image_token_id, counts, max_tiles
        )
        tile = self.tile_size
        pixels = np.zeros((1, len(tiled), max_tiles, 3, tile, tile), dtype=np.float32)
        ratio_mask = np.zeros((1, len(tiled), max_tiles), dtype=np.int64)
        ratio_mask[..., 0] = 1
        for index, (tiles, _layout) in enumerate(tiled):
            pixels[0, index, : len(tiles)] = tiles
            ratio_mask[0, index, : len(tiles)] = 1
        inputs["pixel_values"] = pixels
        inputs["aspect_ratio_ids"] = np.asarray(
            [[layouts.index(layout) + 1 for _, layout in tiled]], dtype=np.int64
        )
        inputs["aspect_ratio_mask"] = ratio_mask
        return inputs
