"""The long tail's packages (GLM-4.1V, GLM-4.5V, GOT-OCR 2.0, Idefics2): their processor and
``mobius generate``, against transformers.

Each family's tiny parity case (``vl_parity_cases/<family>.py``) is made as a random model
with every parameter perturbed and saved with its real processor (over its PIL image
processor), then built once with the CLI (split form). Then:

- the package's torch-free processor (:mod:`mobius_vision.processing`) gives the ids,
  pixels, grids and token types transformers' processor gives (images wide, tall, small,
  over GLM's pixel bound; two in a prompt; none where the processor takes none), and
  GLM's M-RoPE positions equal the torch model's ``get_rope_index``;
- ``mobius generate PKG PROMPT --image FILE`` and a text-only prompt print what
  transformers' greedy ``generate`` decodes;
- Idefics2's image splitting is checked from a package's settings alone;
- an image too elongated for GLM, and placeholders that miscount the images, are one-line
  errors.
"""

from __future__ import annotations

import numpy as np
import pytest
from _vl_built import (
    BuiltVL,
    assert_generate_with_image,
    assert_generate_without_image,
    assert_miscounted_placeholders_fail,
    save_processor,
)
from test_vl_generate import random_image
from test_vl_processors_b import assert_same_inputs
from vl_parity_cases.glm4v import CASES as GLM4V_CASES
from vl_parity_cases.glm4v_moe import CASES as GLM4V_MOE_CASES
from vl_parity_cases.got_ocr2 import CASES as GOT_OCR2_CASES
from vl_parity_cases.idefics2 import CASES as IDEFICS2_CASES

from mobius.cli import main
from mobius_vision.processing import HF_PROCESSOR_FILE, processor_for

#: family -> its case
FAMILIES = {
    "glm4v": GLM4V_CASES["glm4v-two-sizes"],
    "glm4v_moe": GLM4V_MOE_CASES["glm4v_moe-two-sizes"],
    "got_ocr2": GOT_OCR2_CASES["got_ocr2-qwen2-padded-windows"],
    "idefics2": IDEFICS2_CASES["idefics2-mistral-two-sizes"],
}
#: Families whose transformers processor refuses a prompt without an image.
NEEDS_IMAGE = ("got_ocr2",)
# wide, tall, a side under one merge block (scaled up first), over the pixel bound
SIZES = ((37, 45), (45, 20), (5, 30), (70, 50))


class Built(BuiltVL):
    """One family's case (:data:`FAMILIES`)."""

    def __init__(self, family: str, root) -> None:
        super().__init__(FAMILIES[family], root, family)
        self.prompt = self.options["prompts"][0]

    def hf_inputs(self, prompt: str, images: list, tensors: str = "np") -> dict:
        if not images and self.family in NEEDS_IMAGE:  # the tokenizer alone, as a text prompt
            return dict(self.processor.tokenizer([prompt], return_tensors=tensors))
        return super().hf_inputs(prompt, images, tensors)


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def built(request, tmp_path_factory):
    return Built(request.param, tmp_path_factory.mktemp(request.param))


def test_processor_and_positions_match_transformers(built):
    mine = processor_for(built.package, built.family)
    two = [random_image(SIZES[0], 7), random_image(SIZES[1], 8)]
    cases = [(built.prompt, [random_image(size, i)]) for i, size in enumerate(SIZES)]
    cases += [(mine.with_placeholders("w5 w7", 2), two)]
    if built.family not in NEEDS_IMAGE:
        cases.append(("w5 w7 w9", []))
    rope = built.options.get("rope_positions")
    for prompt, images in cases:
        what = f"{prompt!r} with {[i.shape for i in images]}"
        expected = {k: np.asarray(v) for k, v in built.hf_inputs(prompt, images).items()}
        got = mine(prompt, images)
        assert_same_inputs(got, expected, what)
        if rope is None:
            assert mine.rope_positions(got) is None
            continue
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


@pytest.mark.parametrize("built", ["glm4v"], indirect=True)
def test_an_elongated_image_is_a_one_line_error(built, tmp_path, capsys):
    from PIL import Image

    path = tmp_path / "thin.png"
    Image.fromarray(np.zeros((2, 500, 3), np.uint8)).save(path)
    capsys.readouterr()
    assert main(["generate", str(built.package), "w5", "--image", str(path)]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "too elongated for GLM-4V" in lines[0]


def test_idefics2_split_processor_matches_transformers(tmp_path):
    """Idefics2's image splitting (quarters and the whole, each resized) and the fake tokens
    that fold between adjacent images, from a package's settings alone."""
    _model_type, make_config, make_processor, _options = IDEFICS2_CASES[
        "idefics2-split-two-in-one-gelu-tied"
    ]
    config = make_config()
    processor = make_processor(config)
    config.save_pretrained(tmp_path)
    save_processor(processor, tmp_path)
    (tmp_path / "processor_config.json").rename(tmp_path / HF_PROCESSOR_FILE)
    mine = processor_for(tmp_path, "idefics2")
    two = [random_image(SIZES[0], 7), random_image(SIZES[2], 8)]
    cases = [("w5 <image>w7", [random_image(size, i)]) for i, size in enumerate(SIZES)]
    for prompt, images in [*cases, (mine.with_placeholders("w5 w7", 2), two)]:
        expected = {
            k: np.asarray(v)
            for k, v in processor(text=[prompt], images=images, return_tensors="np").items()
        }
        assert_same_inputs(mine(prompt, images), expected, f"{prompt!r} {len(images)} images")


@pytest.mark.parametrize("built", ["got_ocr2", "idefics2"], indirect=True)
def test_placeholders_that_miscount_the_images_are_a_one_line_error(built, image_file, capsys):
    assert_miscounted_placeholders_fail(built, image_file, capsys)
