"""Kosmos-2: its torch-free processor and ``mobius generate``, against transformers.

The tiny parity case (``vl_parity_cases/kosmos2.py``) is made as a random model with every
parameter perturbed and saved with its real processor, then built once with the CLI
(split form). Then:

- the package's processor gives the ids, ``image_embeds_position_mask`` and pixels
  transformers' processor gives (images wide, tall, small; a grounding prompt; no image);
- ``mobius generate PKG PROMPT --image FILE`` prints what transformers' greedy
  ``generate`` decodes, grounding tags included, in both forms (a prompt without an image
  is not compared: transformers' Kosmos-2 refuses one);
- ``mobius info`` on the checkpoint names the graphs;
- two images, an ``<image>`` in the prompt, a missing or unreadable image file: a one-line
  error.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _vl_built import BuiltVL, assert_generate_with_image, random_image, rgb
from test_vl_processors_b import assert_same_inputs
from vl_parity_cases.kosmos2 import CASES as KOSMOS2_CASES

from mobius.cli import main
from mobius.errors import ConfigError
from mobius.testing import build_with_cli, perturb_parameters
from mobius_vision.models.kosmos2 import Kosmos2Config
from mobius_vision.processing import processor_for

# wide, tall, smaller than the tower's input
SIZES = ((37, 45), (45, 20), (5, 30))


class Built(BuiltVL):
    sharpen = False  # make_model sharpens its own way

    def __init__(self, root) -> None:
        super().__init__(KOSMOS2_CASES["kosmos-2"], root, "kosmos-2")
        self.prompt = self.options["prompts"][0]

    def make_model(self, config):
        """The random model, its weights perturbed more, its latent queries made smaller: at
        their init (unit normal) the queries attend to themselves, not to the image, and the
        tiny model's text would not depend on the pixels."""
        model = super().make_model(config)
        perturb_parameters(model, seed=1, scale=0.5)
        with torch.no_grad():
            model.image_to_text_projection.latent_query.mul_(0.1)
        return model


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return Built(tmp_path_factory.mktemp("kosmos-2"))


def test_processor_matches_transformers(built):
    mine = processor_for(built.package, "kosmos-2")
    cases = [(built.prompt, [random_image(size, i)]) for i, size in enumerate(SIZES)]
    cases += [("<grounding> w20 <phrase> w22 </phrase>", [random_image(SIZES[0], 5)])]
    cases += [(" w10 w12 ", [])]
    for prompt, images in cases:
        what = f"{prompt!r} with {[i.shape for i in images]}"
        expected = {k: np.asarray(v) for k, v in built.hf_inputs(prompt, images).items()}
        assert_same_inputs(mine(prompt, images), expected, what)


def test_generate_with_image_matches_transformers(built, image_file, capsys):
    assert_generate_with_image(built, image_file, capsys)


def test_generate_grounding_prompt_in_the_single_form(built, image_file, capsys):
    single = build_with_cli(built.hf, built.hf.parent / "single", "--form", "single")
    prompt = "<grounding> w20 w22"
    expected = built.greedy_text(prompt, [rgb(image_file)])
    capsys.readouterr()
    args = [str(single), prompt, "--image", str(image_file), "--max-new-tokens", "8"]
    assert main(["generate", *args]) == 0
    assert capsys.readouterr().out == expected + "\n"


def test_info_names_what_will_be_built(built, capsys):
    capsys.readouterr()
    assert main(["info", str(built.hf)]) == 0
    out = capsys.readouterr().out
    assert "kosmos-2" in out and "vision-language" in out, out


@pytest.mark.parametrize(
    ("prompt", "images", "message"),
    [
        ("w10 w12", 2, "takes one image per prompt"),
        ("<image> w10 w12", 1, "leave <image> out of it"),
    ],
)
def test_bad_prompts_are_a_one_line_error(built, image_file, capsys, prompt, images, message):
    capsys.readouterr()
    args = [str(built.package), prompt, *["--image", str(image_file)] * images]
    assert main(["generate", *args]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert message in lines[0]


def test_missing_and_unreadable_images_are_a_one_line_error(built, tmp_path, capsys):
    def error(*args: str) -> str:
        assert main(["generate", str(built.package), "w10", *args]) != 0
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1, lines
        return lines[0]

    capsys.readouterr()
    missing = tmp_path / "no.png"
    assert f"no image file at {missing}" in error("--image", str(missing))
    text = tmp_path / "notes.png"
    text.write_text("not an image")
    assert f"cannot read {text} as an image" in error("--image", str(text))


def test_a_latent_query_count_out_of_range_is_refused():
    config = KOSMOS2_CASES["kosmos-2"][1]()
    object.__setattr__(config, "latent_query_num", 0)  # a stranger's config.json says 0
    with pytest.raises(ConfigError, match="latent_query_num must be an int in"):
        Kosmos2Config.from_hf(config)
