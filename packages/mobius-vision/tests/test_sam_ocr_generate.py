"""DeepSeek-OCR 2 (a SAM tower read into learned queries by a Qwen2 stack, over DeepSeek-V2's
experts): its processor and ``mobius generate``, against transformers.

The tiny parity case (``vl_parity_cases/deepseek_ocr2.py``) is made as a random model with
every parameter perturbed and saved with its real processor, then built once with the CLI
(split form). Then:

- the package's torch-free processor gives the ids, the global views, the local tiles and
  their counts transformers' processor gives (an image that fits a tile, wide and tall
  ones cut into tiles, two in a prompt, none);
- ``mobius generate PKG PROMPT --image FILE`` (an image with and without tiles) and a
  text-only prompt print what transformers' greedy ``generate`` decodes;
- ``mobius info`` on the checkpoint names the family and its task;
- a processor whose tile size is not the built graph's, and image placeholders that
  miscount the images, are one-line errors.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from _vl_built import (
    BuiltVL,
    assert_generate_with_image,
    assert_generate_without_image,
    assert_miscounted_placeholders_fail,
    random_image,
)
from test_vl_processors_b import assert_same_inputs
from vl_parity_cases.deepseek_ocr2 import CASES as DEEPSEEK_OCR2_CASES

from mobius.cli import main
from mobius.errors import MobiusError
from mobius.testing import perturb_parameters
from mobius_vision.processing import processor_for
from mobius_vision.processing._settings import HF_PROCESSOR_FILE

#: an image inside a tile (global view only), wide and tall ones cut into tiles
SIZES = ((37, 45), (50, 100), (120, 60))


class Built(BuiltVL):
    def __init__(self, root) -> None:
        super().__init__(DEEPSEEK_OCR2_CASES["deepseek_ocr2-tiles"], root, "deepseek_ocr2")
        self.prompt = "w5 w7 <image>"  # the image last: the greedy text follows its pixels

    def make_model(self, config):
        """The random model with a louder projector: among 256 global-view tokens, a tiny
        model's text hardly depends on the pixels otherwise."""
        model = super().make_model(config)
        perturb_parameters(model.model.multi_modal_projector, seed=2, scale=1.0)
        return model


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return Built(tmp_path_factory.mktemp("deepseek_ocr2"))


@pytest.fixture(scope="module")
def tiled_image_file(tmp_path_factory):
    """A wide random PNG (50x100): two local tiles beside the global view."""
    from PIL import Image

    path = tmp_path_factory.mktemp("images") / "tiled.png"
    Image.fromarray(random_image(SIZES[1], seed=3)).save(path)
    return path


def test_processor_matches_transformers(built):
    mine = processor_for(built.package, built.family)
    cases = [(built.prompt, [random_image(size, i)]) for i, size in enumerate(SIZES)]
    cases.append(("<image> w5 <image> w7", [random_image(SIZES[1], 7), random_image(SIZES[0], 8)]))
    cases.append(("w5 w7 w9", []))
    for prompt, images in cases:
        what = f"{prompt!r} with {[i.shape for i in images]}"
        expected = {k: np.asarray(v) for k, v in built.hf_inputs(prompt, images).items()}
        got = mine(prompt, images)
        if images and "pixel_values_local" not in expected:  # transformers leaves it out
            assert got.pop("pixel_values_local").shape[0] == 0, what
        assert_same_inputs(got, expected, what)


@pytest.mark.parametrize("tiled", [False, True])
def test_generate_with_image_matches_transformers(
    built, image_file, tiled_image_file, tiled, capsys
):
    assert_generate_with_image(built, tiled_image_file if tiled else image_file, capsys)


def test_generate_without_image_matches_transformers(built, capsys):
    assert_generate_without_image(built, capsys)


def test_info_names_what_will_be_built(built, capsys):
    capsys.readouterr()
    assert main(["info", str(built.hf)]) == 0
    out = capsys.readouterr().out
    assert "deepseek_ocr2" in out and "vision-language" in out, out


def test_a_tile_size_the_graph_does_not_take_is_an_error(built, tmp_path):
    package = tmp_path / "package"
    package.mkdir()
    for path in built.package.iterdir():
        (package / path.name).symlink_to(path)
    settings = json.loads((built.package / HF_PROCESSOR_FILE).read_text())
    settings["image_processor"]["tile_size"] = 40
    (package / HF_PROCESSOR_FILE).unlink()
    (package / HF_PROCESSOR_FILE).write_text(json.dumps(settings))
    mine = processor_for(package, built.family)
    with pytest.raises(MobiusError, match="tile_size 40 are not the model's 64 and 48"):
        mine(built.prompt, [random_image(SIZES[1])])


def test_image_tokens_that_miscount_the_images_are_a_one_line_error(built, image_file, capsys):
    assert_miscounted_placeholders_fail(built, image_file, capsys)
