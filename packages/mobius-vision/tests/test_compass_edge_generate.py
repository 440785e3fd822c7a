"""Cohere Compass and Cosmos3 Edge packages: their processor, ``mobius generate`` and
``mobius info``, against transformers.

Each family's tiny parity case (``vl_parity_cases/<family>.py``) is made as a random model
with every parameter perturbed and saved with its real processor (over its PIL image
processor), then built once with the CLI (split form). Then:

- the package's torch-free processor (:mod:`mobius_vision.processing`) gives the ids,
  pixels, grids and token types transformers' processor gives (images wide, tall, small,
  over the pixel bound; two in a prompt; none), and the M-RoPE positions the torch
  model's ``get_rope_index`` gives;
- ``mobius generate PKG PROMPT --image FILE`` and a text-only prompt print what
  transformers' greedy ``generate`` decodes;
- ``mobius info`` on the checkpoint names the composition it builds, and Cohere Compass's
  ``--part text`` package generates as transformers does without an image;
- placeholders that miscount the images, a Cohere Compass decoder naming no rope for one
  of its layer types, and a Cosmos3 Edge position table that is not square are one-line
  errors.
"""

from __future__ import annotations

import numpy as np
import pytest
from _vl_built import (
    TEXT_PROMPT,
    assert_generate_with_image,
    assert_generate_without_image,
    assert_miscounted_placeholders_fail,
    built_fixture,
    random_image,
)
from test_vl_processors_b import assert_same_inputs
from vl_parity_cases.cohere_compass import CASES as COHERE_COMPASS_CASES
from vl_parity_cases.cosmos3_edge import CASES as COSMOS3_EDGE_CASES

from mobius.cli import main
from mobius_vision.processing import processor_for

#: family -> its case
FAMILIES = {
    "cohere_compass": COHERE_COMPASS_CASES["cohere_compass-deepstack-sliding-nope"],
    "cosmos3_edge": COSMOS3_EDGE_CASES["cosmos3_edge-two-sizes-antialiased"],
}
#: family -> the model class ``mobius info`` names
MODEL_CLASSES = {
    "cohere_compass": "CohereCompassForConditionalGeneration",
    "cosmos3_edge": "Cosmos3EdgeForConditionalGeneration",
}
# wide, tall, a side under one merge block (scaled up first), over the pixel bound
SIZES = ((37, 45), (45, 20), (5, 30), (70, 50))


built = built_fixture(FAMILIES)


@pytest.fixture(scope="module")
def image_file(tmp_path_factory):
    from PIL import Image

    path = tmp_path_factory.mktemp("images") / "wide.png"
    Image.fromarray(random_image((37, 45), seed=1)).save(path)
    return path


def test_processor_and_positions_match_transformers(built):
    mine = processor_for(built.package, built.family)
    two = [random_image(SIZES[0], 7), random_image(SIZES[1], 8)]
    cases = [(built.prompt, [random_image(size, i)]) for i, size in enumerate(SIZES)]
    cases += [(mine.with_placeholders("w5 w7", 2), two), ("w5 w7 w9", [])]
    rope = built.options["rope_positions"]
    for prompt, images in cases:
        what = f"{prompt!r} with {[i.shape for i in images]}"
        expected = {k: np.asarray(v) for k, v in built.hf_inputs(prompt, images).items()}
        got = mine(prompt, images)
        assert_same_inputs(got, expected, what)
        positions, deltas = mine.rope_positions(got)
        if images:
            want_positions, want_deltas = rope(built.model, expected)
        else:  # without images its generate counts plainly
            length = got["input_ids"].shape[1]
            want_positions = np.broadcast_to(np.arange(length), (3, 1, length))
            want_deltas = np.zeros((1, 1), np.int64)
        np.testing.assert_array_equal(positions, want_positions, err_msg=what)
        np.testing.assert_array_equal(deltas, want_deltas, err_msg=what)


def test_generate_with_image_matches_transformers(built, image_file, capsys):
    assert_generate_with_image(built, image_file, capsys)


def test_generate_without_image_matches_transformers(built, capsys):
    assert_generate_without_image(built, capsys)


def test_info_names_the_composition(built, capsys):
    capsys.readouterr()
    assert main(["info", str(built.hf)]) == 0
    out = capsys.readouterr().out
    assert f"mobius-vision ({MODEL_CLASSES[built.family]})" in out
    assert "vision-language" in out
    if built.family == "cohere_compass":  # its decoder is a registered text type as well
        assert "cohere_compass whole: vision/, embedding/ and decoder/ graphs" in out
        assert "--part text: the cohere_compass_text text decoder alone" in out


def test_placeholders_that_miscount_the_images_are_a_one_line_error(built, image_file, capsys):
    assert_miscounted_placeholders_fail(built, image_file, capsys)


def test_a_layer_type_without_rope_parameters_is_a_one_line_error(tmp_path, capsys):
    """Every layer type the decoder uses needs its ``rope_parameters`` entry (None: NoPE)."""
    config = FAMILIES["cohere_compass"][1]()
    rope = dict(config.text_config.rope_parameters)
    del rope["full_attention"]
    config.text_config.rope_parameters = rope
    config.save_pretrained(tmp_path / "hf")
    assert main(["build", "--model", str(tmp_path / "hf"), str(tmp_path / "out")]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "cohere_compass_text: rope_parameters names no 'full_attention' entry" in lines[0]


def test_a_position_table_that_is_not_square_is_a_one_line_error(tmp_path, capsys):
    config = FAMILIES["cosmos3_edge"][1]()
    config.vision_config.num_patches = 90
    config.save_pretrained(tmp_path / "hf")
    assert main(["build", "--model", str(tmp_path / "hf"), str(tmp_path / "out")]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "cosmos3_edge_vision: num_patches 90 is not a square" in lines[0]


@pytest.mark.parametrize("built", ["cohere_compass"], indirect=True)
def test_part_text_generates_as_transformers_without_image(built, tmp_path, capsys):
    """``--part text`` (the decoder alone, ``cohere_compass_text`` over 1-D positions, the
    wrapper's head and logit scale) prints transformers' greedy text of a text-only prompt."""
    package = tmp_path / "text"
    assert main(["build", "--model", str(built.hf), "--part", "text", str(package)]) == 0
    expected = built.greedy_text(TEXT_PROMPT, [])
    capsys.readouterr()
    assert main(["generate", str(package), TEXT_PROMPT, "--max-new-tokens", "8"]) == 0
    assert capsys.readouterr().out == expected + "\n"
