"""LightOnOCR (Pixtral's tower, Mistral 3's merger), PP-Chart2Table (GOT-OCR 2.0 under its own
type), EXAONE 4.5 (Qwen2.5-VL's tower with grouped-query attention, over EXAONE 4) and Mistral
Small 4 (Mistral 3 over a Mistral 4 decoder): their processors and ``mobius generate``, against
transformers.

Each family's tiny parity case (``vl_parity_cases/<family>.py``) is made as a random model
with every parameter perturbed and saved with its real processor, then built once with
the CLI (split form). Then:

- the package's torch-free processor gives the ids and pixels transformers' processor
  gives (images wide, tall, small, over LightOnOCR's longest edge; two in a prompt);
- ``mobius generate PKG PROMPT --image FILE``, with the family's placeholder and without
  one, and a text-only prompt print what transformers' greedy ``generate`` decodes;
- ``mobius info`` on the checkpoint names the family's graphs and its decoder;
- image tokens that miscount the images are a one-line error.
"""

from __future__ import annotations

import numpy as np
import pytest
from _vl_built import BuiltVL, assert_generate_with_image, assert_generate_without_image, rgb
from test_vl_generate import random_image
from test_vl_processors_b import assert_same_inputs
from vl_parity_cases.exaone4_5 import CASES as EXAONE4_5_CASES
from vl_parity_cases.lighton_ocr import CASES as LIGHTON_OCR_CASES
from vl_parity_cases.mistral3_mistral4 import CASES as MISTRAL_SMALL4_CASES
from vl_parity_cases.pp_chart2table import CASES as PP_CHART2TABLE_CASES

from mobius.cli import main
from mobius_vision.processing import processor_for

#: family -> its case
FAMILIES = {
    "exaone4_5": EXAONE4_5_CASES["exaone4_5-exaone4-gqa-tower-two-sizes"],
    "lighton_ocr": LIGHTON_OCR_CASES["lighton_ocr-qwen3-two-sizes"],
    # Mistral Small 4: Mistral 3's wrapper (its processor verified) over the Mistral 4 decoder
    "mistral3": MISTRAL_SMALL4_CASES["mistral3-mistral4-two-sizes"],
    "pp_chart2table": PP_CHART2TABLE_CASES["pp_chart2table-qwen2-tied"],
}
#: family -> the decoder type ``mobius info`` names (``--part text``)
DECODERS = {
    "exaone4_5": "exaone4",
    "lighton_ocr": "qwen3",
    "mistral3": "mistral4",
    "pp_chart2table": "qwen2",
}
#: Families whose transformers processor refuses a prompt without an image.
NEEDS_IMAGE = ("pp_chart2table",)
# wide, tall, a side under one merge block (scaled up), over LightOnOCR's longest edge
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


def test_processor_matches_transformers(built):
    mine = processor_for(built.package, built.family)
    two = [random_image(SIZES[0], 7), random_image(SIZES[1], 8)]
    cases = [(built.prompt, [random_image(size, i)]) for i, size in enumerate(SIZES)]
    cases += [(mine.with_placeholders("w5 w7", 2), two)]
    if built.family not in NEEDS_IMAGE:
        cases.append(("w5 w7 w9", []))
    for prompt, images in cases:
        what = f"{prompt!r} with {[i.shape for i in images]}"
        expected = {k: np.asarray(v) for k, v in built.hf_inputs(prompt, images).items()}
        assert_same_inputs(mine(prompt, images), expected, what)


def test_generate_with_image_matches_transformers(built, image_file, capsys):
    assert_generate_with_image(built, image_file, capsys)


def test_generate_writes_the_placeholders_a_prompt_lacks(built, image_file, capsys):
    mine = processor_for(built.package, built.family)
    expected = built.greedy_text(mine.with_placeholders("w5 w7 w9", 1), [rgb(image_file)])
    capsys.readouterr()
    args = [str(built.package), "w5 w7 w9", "--image", str(image_file)]
    assert main(["generate", *args, "--max-new-tokens", "8"]) == 0
    assert capsys.readouterr().out == expected + "\n"


def test_generate_without_image_matches_transformers(built, capsys):
    assert_generate_without_image(built, capsys)


def test_info_names_what_will_be_built(built, capsys):
    capsys.readouterr()
    assert main(["info", str(built.hf)]) == 0
    out = capsys.readouterr().out
    assert f"builds            {built.family} whole: vision/, embedding/ and decoder/" in out, out
    assert f"the {DECODERS[built.family]} text decoder alone" in out, out


def test_image_tokens_that_miscount_the_images_are_a_one_line_error(built, image_file, capsys):
    mine = processor_for(built.package, built.family)
    token = mine.image_token
    capsys.readouterr()
    prompt = f"w5 {token} w7 {token}"
    assert main(["generate", str(built.package), prompt, "--image", str(image_file)]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert f"holds 2 {token}" in lines[0]
