"""Llama 4's torch-free image processor against transformers' ``Llama4ImageProcessor``.

transformers' class needs torchvision, which the workspace does not install. Its outputs
were recorded once (torch 2.15, torchvision 0.29.1) as SHA-256 digests of the resized
uint8 images and of ``pixel_values``: mobius must give the same bytes. Where torchvision
is installed the comparison also runs live. The prompt layout is checked against
transformers' own ``Llama4Processor`` in test_vl_generate.py (family ``llama4``).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from mobius.errors import MobiusError
from mobius_vision.processing._antialias import resize_antialiased
from mobius_vision.processing._image import ImageSettings
from mobius_vision.processing._settings import PackageSettings
from mobius_vision.processing.llama4 import LLAMA4_DEFAULTS, Llama4Processor, image_prompt

# (image height, width), (target height, width) -> torchvision's resize, digested
RESIZES = {
    ((45, 20), (16, 16)): "3f37fbd11e22608a",
    ((37, 45), (30, 13)): "a5abbd15ad23fb79",
    ((7, 9), (40, 33)): "bcb10e75898af78b",  # upscaling both ways
    ((120, 90), (17, 64)): "583ed5df3a045848",
}
# (image height, width), resize_to_max_canvas -> (pixel_values shape, digest); 16-pixel
# tiles, at most 4: a 3x1 canvas plus the global tile, and a 2x2 canvas filled to the brim
TILINGS = {
    ((45, 20), False): ((4, 3, 16, 16), "2178c9cf2f15d766"),
    ((37, 45), True): ((5, 3, 16, 16), "e4086ee4d3f38f21"),
}


def digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]


def image(size: tuple[int, int], channels_first: bool = True) -> np.ndarray:
    """The recorded cases' image: seeded by its size."""
    height, width = size
    rng = np.random.default_rng(height * 1000 + width)
    shape = (3, height, width) if channels_first else (height, width, 3)
    return rng.integers(0, 256, shape, dtype=np.uint8)


def processor(resize_to_max_canvas: bool = False, **settings) -> Llama4Processor:
    settings = {
        "size": {"height": 16, "width": 16},
        "max_patches": 4,
        "resize_to_max_canvas": resize_to_max_canvas,
        **settings,
    }
    image_settings = ImageSettings.from_dict(settings, **LLAMA4_DEFAULTS)
    return Llama4Processor(None, image_settings, PackageSettings())


@pytest.mark.parametrize("case", sorted(RESIZES))
def test_resize_is_torchvisions(case):
    size, target = case
    assert digest(resize_antialiased(image(size), target)) == RESIZES[case]


@pytest.mark.parametrize("case", sorted(TILINGS))
def test_tiles_are_transformers(case):
    size, max_canvas = case
    tiles, _grid = processor(max_canvas).tiles(image(size, channels_first=False).transpose(2, 0, 1))
    shape, expected = TILINGS[case]
    assert tiles.shape == shape and tiles.dtype == np.float32
    assert digest(tiles) == expected


@pytest.mark.parametrize(
    "size, max_canvas", [((45, 20), False), ((37, 45), True), ((300, 17), False), ((5, 5), True)]
)
def test_tiles_match_torchvision_live(size, max_canvas):
    pytest.importorskip("torchvision", reason="transformers' Llama4ImageProcessor needs it")
    from transformers.models.llama4.image_processing_llama4 import Llama4ImageProcessor

    hf = Llama4ImageProcessor(
        size={"height": 16, "width": 16}, max_patches=4, resize_to_max_canvas=max_canvas
    )
    pixels = image(size, channels_first=False)
    expected = hf(images=[pixels], return_tensors="pt")
    tiles, grid = processor(max_canvas).tiles(pixels.transpose(2, 0, 1))
    np.testing.assert_array_equal(tiles, expected["pixel_values"].float().numpy())
    assert list(grid) == expected["aspect_ratios"][0].tolist()


def test_image_prompt_layout():
    assert image_prompt(1, 1, 2) == "<|image_start|><|image|><|patch|><|patch|><|image_end|>"
    assert image_prompt(2, 2, 1) == (
        "<|image_start|><|patch|><|tile_x_separator|><|patch|><|tile_y_separator|>"
        "<|patch|><|tile_x_separator|><|patch|><|tile_y_separator|>"
        "<|image|><|patch|><|image_end|>"
    )


def test_other_filters_and_bad_settings_are_refused():
    with pytest.raises(MobiusError, match="bilinear filter only"):
        processor(resample=3).tiles(image((20, 20)))
    with pytest.raises(MobiusError, match="max_patches"):
        processor(max_patches="4").tiles(image((20, 20)))
    with pytest.raises(MobiusError, match="square tile"):
        processor(size={"height": 16, "width": 32}).tiles(image((20, 20)))
