"""Gemma 4 packages: their processor and ``mobius generate``, against transformers.

The tiny parity case (``vl_parity_cases/gemma4.py``) is made as a random model with every
parameter perturbed (then more, so that its greedy text depends on the pixels) and saved
with its real processor (``Gemma4Processor`` over the PIL image processor), then built
once with the CLI (split form). Then:

- the package's torch-free processor (``gemma4:Gemma4Processor``) gives the ids, patches,
  patch positions and token types transformers' processor gives (images wide, tall,
  small, very wide, two in a prompt, none);
- ``mobius generate PKG PROMPT --image FILE`` and a text-only prompt print what
  transformers' greedy ``generate`` decodes;
- a checkpoint whose every token attends both ways (``use_bidirectional_attention="all"``,
  an encoder) is refused in one line.
"""

from __future__ import annotations

import numpy as np
import pytest
from _vl_built import BuiltVL
from test_vl_generate import pixels, random_image
from test_vl_processors_b import assert_same_inputs
from vl_parity_cases.gemma4 import CASES, TEXT, gemma4_config

from mobius.cli import main
from mobius_vision.processing import processor_for
from mobius_vision.testing import make_random_vl_model

# wide, tall, small (scaled up), very wide (one pooled block high)
SIZES = ((37, 45), (45, 20), (9, 7), (6, 200))


class Built(BuiltVL):
    """The Gemma 4 case, its greedy text depending on the pixels."""

    def __init__(self, root) -> None:
        super().__init__(CASES["gemma4"], root, "gemma4")
        self.prompt = self.options["prompts"][0]

    def hf_inputs(self, prompt: str, images: list, tensors: str = "np") -> dict:
        batch = [images] if images else None  # the images of one prompt, as one list
        return dict(self.processor(text=[prompt], images=batch, return_tensors=tensors))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return Built(tmp_path_factory.mktemp("gemma4"))


@pytest.fixture(scope="module")
def image_file(tmp_path_factory):
    from PIL import Image

    path = tmp_path_factory.mktemp("images") / "wide.png"
    Image.fromarray(random_image((37, 45), seed=1)).save(path)
    return path


def test_processor_matches_transformers(built):
    mine = processor_for(built.package, "gemma4")
    two = [random_image(SIZES[0], 7), random_image(SIZES[1], 8)]
    cases = [(built.prompt, [random_image(size, i)]) for i, size in enumerate(SIZES)]
    cases += [(mine.with_placeholders("w15 w17", 2), two), ("w15 w17 w19", [])]
    for prompt, images in cases:
        what = f"{prompt!r} with {[i.shape for i in images]}"
        expected = {k: np.asarray(v) for k, v in built.hf_inputs(prompt, images).items()}
        assert_same_inputs(mine(prompt, images), expected, what)


def test_generate_with_image_matches_transformers(built, image_file, capsys):
    expected = built.greedy_text(built.prompt, [pixels(image_file)])
    # the tiny model's text depends on the image, so a wrong pixel or position shows
    assert built.greedy_text(built.prompt, [random_image((37, 45), seed=2)]) != expected
    capsys.readouterr()  # the build's lines
    args = [str(built.package), built.prompt, "--image", str(image_file)]
    assert main(["generate", *args, "--max-new-tokens", "8"]) == 0
    out, err = capsys.readouterr()
    assert out == expected + "\n"
    assert "new tokens" in err


def test_generate_without_image_matches_transformers(built, capsys):
    expected = built.greedy_text("w15 w17 w19", [])
    capsys.readouterr()
    assert main(["generate", str(built.package), "w15 w17 w19", "--max-new-tokens", "8"]) == 0
    assert capsys.readouterr().out == expected + "\n"


def test_an_encoder_config_is_refused_in_one_line(tmp_path, capsys):
    config = gemma4_config(text=dict(TEXT, use_bidirectional_attention="all"))()
    make_random_vl_model(config).save_pretrained(tmp_path / "hf")
    capsys.readouterr()
    assert main(["build", "--model", str(tmp_path / "hf"), str(tmp_path / "out")]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "use_bidirectional_attention='all' makes an encoder" in lines[0]
