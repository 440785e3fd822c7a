"""Molmo2's package: its processor and ``mobius generate``, against transformers
(Molmo2's image processor is torchvision-only: its parity case's torch port stands in).

The tiny parity case (``vl_parity_cases/molmo2.py``) is made as a random model with every
parameter perturbed and saved with its real processor, then built once with the CLI
(split form). Then:

- the package's torch-free processor (:mod:`mobius_vision.processing.molmo2`) gives the
  ids, patches, pooling windows and grids transformers' processor gives (images wide,
  tall, thin, square, large; two in a prompt; none), also without ``<im_col>`` tokens;
- ``mobius generate PKG PROMPT --image FILE`` and a text-only prompt print what
  transformers' greedy ``generate`` decodes;
- placeholders that miscount the images, a config mobius cannot build and a
  resample it does not reproduce are one-line errors; ``mobius info`` names the parts.

Step3p7 (``step3p7``) is not built yet: see the package's SUPPORT.md.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from _vl_built import (
    assert_generate_with_image,
    assert_generate_without_image,
    assert_miscounted_placeholders_fail,
    built_fixture,
    save_processor,
)
from test_vl_generate import random_image
from test_vl_processors_b import assert_same_inputs
from vl_parity_cases.molmo2 import CASES as MOLMO2_CASES

from mobius.cli import main
from mobius.errors import MobiusError
from mobius_vision.processing import HF_PROCESSOR_FILE, processor_for

#: family -> its case
FAMILIES = {"molmo2": MOLMO2_CASES["molmo2-qwen3-two-sizes"]}
# wide, tall, thin, square (one crop's size), large (the most crops)
SIZES = ((37, 45), (45, 20), (3, 40), (16, 16), (90, 70))


built = built_fixture(FAMILIES)


#: One uint8 step of a normalised pixel (std 0.5): where torch's bilinear kernel and
#: mobius's round a resized value near a tie to different sides.
PIXEL_STEP = 1 / 255 / 0.5


def assert_same_pixels(got: np.ndarray, expected: np.ndarray, what: str) -> None:
    """Equal pixels, but for a rare one (at most 0.2%; measured over random sizes: 0.006%)
    one uint8 step apart: torch's CPU bilinear kernel rounds its float32 arithmetic in an
    order no numpy ordering reproduces for every size (:func:`~mobius_vision.processing.
    molmo2.bilinear`)."""
    assert got.shape == expected.shape and got.dtype == np.float32, what
    diff = np.abs(got - expected)
    assert diff.max() <= PIXEL_STEP + 1e-6, what
    assert np.mean(diff > 1e-6) <= 2e-3, what


def same_inputs(mine, transformers_processor, prompts_and_images) -> None:
    for prompt, images in prompts_and_images:
        what = f"{prompt!r} with {[i.shape for i in images]}"
        expected = transformers_processor(text=[prompt], images=images or None, return_tensors="np")
        expected = {k: np.asarray(v) for k, v in expected.items()}
        got = mine(prompt, images)
        if "pixel_values" in expected:
            assert_same_pixels(got.pop("pixel_values"), expected.pop("pixel_values"), what)
        assert_same_inputs(got, expected, what)


def test_processor_matches_transformers(built):
    mine = processor_for(built.package, built.family)
    cases = [(built.prompt, [random_image(size, i)]) for i, size in enumerate(SIZES)]
    two = [random_image(SIZES[0], 7), random_image(SIZES[1], 8)]
    cases += [(mine.with_placeholders("w5 w7", 2), two), ("w5 w7 w9", [])]
    same_inputs(mine, built.processor, cases)


def settings_only(family: str, directory, change) -> tuple:
    """The family's transformers processor, ``change``d, and mobius's processor read from
    ``directory``, which holds only the config and the processor's settings (no build)."""
    _model_type, make_config, make_processor, *_ = FAMILIES[family]
    config = make_config()
    processor = make_processor(config)
    change(processor)
    config.save_pretrained(directory)
    save_processor(processor, directory)
    (directory / "processor_config.json").rename(directory / HF_PROCESSOR_FILE)
    return processor, processor_for(directory, family)


def test_processor_without_column_tokens_matches_transformers(tmp_path):
    def without_columns(processor):
        processor.image_use_col_tokens = False
        processor.use_single_crop_start_token = False

    processor, mine = settings_only("molmo2", tmp_path, without_columns)
    same_inputs(mine, processor, [("w5 <|image|> w7", [random_image(SIZES[0])])])


def test_a_resample_not_reproduced_is_refused(tmp_path):
    def bicubic(processor):
        processor.image_processor.resample = 3

    _, mine = settings_only("molmo2", tmp_path, bicubic)
    with pytest.raises(MobiusError) as error:
        mine("w5 <|image|>", [random_image(SIZES[0])])
    assert "only the bilinear resize is reproduced, not resample 3" in str(error.value)
    assert "\n" not in str(error.value)


def test_generate_with_image_matches_transformers(built, image_file, capsys):
    assert_generate_with_image(built, image_file, capsys)


def test_generate_without_image_matches_transformers(built, capsys):
    assert_generate_without_image(built, capsys)


def test_placeholders_that_miscount_the_images_are_a_one_line_error(built, image_file, capsys):
    assert_miscounted_placeholders_fail(built, image_file, capsys)


def test_info_names_the_parts(built, capsys):
    capsys.readouterr()
    assert main(["info", str(built.hf)]) == 0
    out = capsys.readouterr().out
    assert "molmo2" in out


@pytest.mark.parametrize(
    ("section", "field", "value", "message"),
    [
        ("text_config", "rope_scaling_layers", [0], "a RoPE scaled on some layers only"),
        ("adapter_config", "text_hidden_size", 48, "text_hidden_size 48 differs"),
        (None, "image_patch_id", 500, "image_patch_id 500 is not a token id"),
    ],
)
def test_a_config_mobius_cannot_build_is_a_one_line_error(
    section, field, value, message, tmp_path, capsys
):
    _model_type, make_config, *_ = FAMILIES["molmo2"]
    make_config().save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["text_config"]["rope_parameters"] = {"rope_type": "linear", "factor": 2.0}
    (config if section is None else config[section])[field] = value
    path.write_text(json.dumps(config), encoding="utf-8")
    assert main(["info", str(tmp_path)]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert message in lines[0]
