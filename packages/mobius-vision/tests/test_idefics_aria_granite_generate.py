"""The Idefics3 / Aria / Granite group's packages (Aria, Granite-Docling, Granite 4 Vision,
LFM3-VL): their processor and ``mobius generate``,
against transformers.

Each family's tiny parity case (``vl_parity_cases/<family>.py``) is made as a random model
with every parameter perturbed and saved with its real processor (over its PIL image
processor), then built once with the CLI (split form). Then:

- the package's torch-free processor (:mod:`mobius_vision.processing`) gives the ids,
  pixels and masks transformers' processor gives (images wide, tall, small; two in a
  prompt; none);
- ``mobius generate PKG PROMPT --image FILE`` and a text-only prompt print what
  transformers' greedy ``generate`` decodes;
- placeholders that miscount the images, a package whose config cannot say how many
  tokens an image takes, and settings that ask for what is not built, are one-line errors;
- Aria's ``--part text`` (its MoE decoder alone) computes what the wrapper computes on text.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from _vl_built import (
    assert_generate_with_image,
    assert_generate_without_image,
    assert_miscounted_placeholders_fail,
    built_fixture,
)
from test_vl_generate import random_image
from test_vl_processors_b import assert_same_inputs
from vl_parity_cases.aria import CASES as ARIA_CASES
from vl_parity_cases.granite4_vision import CASES as GRANITE4_VISION_CASES
from vl_parity_cases.granite_docling import CASES as GRANITE_DOCLING_CASES
from vl_parity_cases.lfm3_vl import CASES as LFM3_VL_CASES

from mobius.cli import main
from mobius.testing import OnnxCausalLM, build_with_cli, text_forward
from mobius.testing._parity import compare_causal_lm
from mobius_vision.processing import processor_for

#: family -> its case
FAMILIES = {
    "aria": ARIA_CASES["aria-two-shapes-padded"],
    "granite_docling": GRANITE_DOCLING_CASES["granite_docling-tiles-deepstack"],
    "lfm3_vl": LFM3_VL_CASES["lfm3_vl-two-grids"],
    "granite4_vision": GRANITE4_VISION_CASES["granite4_vision-wide-tall-deepstack"],
}
# wide, tall, small (Aria raises its short side to the processor's minimum), very wide
SIZES = ((37, 45), (45, 20), (5, 30), (8, 40))


built = built_fixture(FAMILIES)


def test_processor_matches_transformers(built):
    mine = processor_for(built.package, built.family)
    two = [random_image(SIZES[0], 7), random_image(SIZES[1], 8)]
    cases = [(built.prompt, [random_image(size, i)]) for i, size in enumerate(SIZES)]
    cases += [(mine.with_placeholders("w5 w7", 2), two), ("w5 w7 w9", [])]
    for prompt, images in cases:
        what = f"{prompt!r} with {[i.shape for i in images]}"
        expected = {k: np.asarray(v) for k, v in built.hf_inputs(prompt, images).items()}
        assert_same_inputs(mine(prompt, images), expected, what)


def test_generate_with_image_matches_transformers(built, image_file, capsys):
    assert_generate_with_image(built, image_file, capsys)


def test_generate_without_image_matches_transformers(built, capsys):
    assert_generate_without_image(built, capsys)


def test_placeholders_that_miscount_the_images_are_a_one_line_error(built, image_file, capsys):
    assert_miscounted_placeholders_fail(built, image_file, capsys)


@pytest.mark.parametrize("built", ["aria"], indirect=True)
def test_aria_without_queries_for_its_tower_is_a_one_line_error(
    built, image_file, tmp_path, capsys
):
    package = tmp_path / "package"
    shutil.copytree(built.package, package)
    config = json.loads((package / "config.json").read_text())
    config["projector_patch_to_query_dict"] = {"7": 3}
    (package / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    assert main(["generate", str(package), built.prompt, "--image", str(image_file)]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "projector_patch_to_query_dict has no query count for 1225 patches" in lines[0]


@pytest.mark.parametrize("built", ["granite_docling"], indirect=True)
def test_granite_docling_fine_route_is_a_one_line_error(built, image_file, tmp_path, capsys):
    """The fine connector path is not built: a package whose image settings ask for it
    is refused rather than fed the coarse path's token count."""
    package = tmp_path / "package"
    shutil.copytree(built.package, package)
    settings = processor_for(package, built.family).image.raw
    (package / "preprocessor_config.json").write_text(json.dumps({**settings, "fine_route": True}))
    capsys.readouterr()
    assert main(["generate", str(package), built.prompt, "--image", str(image_file)]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "fine route (fine_route) is not built" in lines[0]


@pytest.mark.parametrize("built", ["aria"], indirect=True)
def test_aria_text_part_matches_the_wrappers_text_path(built, tmp_path):
    package = build_with_cli(built.hf, tmp_path / "text", "--part", "text")
    onnx_model = OnnxCausalLM(package / "model.onnx")
    compare_causal_lm(text_forward(built.model), onnx_model, lengths=(7, 4)).assert_close()
