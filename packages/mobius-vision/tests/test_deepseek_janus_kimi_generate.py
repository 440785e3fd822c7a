"""DeepSeek-VL hybrid's, Janus's and Kimi K2.5's packages: their processor and ``mobius
generate``, against transformers (Kimi K2.5's image processor is torchvision-only: its
parity case's PIL port stands in for it).

Each family's tiny parity case (``vl_parity_cases/<family>.py``) is made as a random model
with every parameter perturbed and saved with its real processor (over its PIL image
processor), then built once with the CLI (split form). Then:

- the package's torch-free processor (:mod:`mobius_vision.processing`) gives the ids and
  pixels (both resolutions for the hybrid) transformers' processor gives (images wide,
  tall, small; two in a prompt; none), and Janus's default system prompt is put first
  where the processor's settings ask; a Kimi K2.5 image over its patch budget is refused;
- ``mobius generate PKG PROMPT --image FILE`` and a text-only prompt print what
  transformers' greedy ``generate`` decodes;
- placeholders that miscount the images, and a Janus config mobius cannot build, are
  one-line errors.
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
    save_processor,
)
from test_vl_generate import random_image
from test_vl_processors_b import assert_same_inputs
from vl_parity_cases.deepseek_vl_hybrid import CASES as DEEPSEEK_VL_HYBRID_CASES
from vl_parity_cases.janus import CASES as JANUS_CASES
from vl_parity_cases.kimi_k25 import CASES as KIMI_K25_CASES

from mobius.cli import main
from mobius.errors import MobiusError
from mobius_vision.processing import HF_PROCESSOR_FILE, processor_for

#: family -> its case
FAMILIES = {
    "deepseek_vl_hybrid": DEEPSEEK_VL_HYBRID_CASES["deepseek_vl_hybrid-llama"],
    "janus": JANUS_CASES["janus-llama"],
    "kimi_k25": KIMI_K25_CASES["kimi_k25-deepseek_v3-two-sizes"],
}
#: The prompt of a case that names none (the parity kit's first).
PROMPT = "USER: <image>\nw5 w7 w9 ASSISTANT:"
# wide, tall, under the processor's min_size once resized, square
SIZES = ((37, 45), (45, 20), (3, 40), (16, 16))


class Built(BuiltVL):
    """One family's case (:data:`FAMILIES`)."""

    def __init__(self, family: str, root) -> None:
        super().__init__(FAMILIES[family], root, family)
        self.prompt = self.options.get("prompts", [PROMPT])[0]


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def built(request, tmp_path_factory):
    return Built(request.param, tmp_path_factory.mktemp(request.param))


def same_inputs(mine, transformers_processor, prompts_and_images) -> None:
    for prompt, images in prompts_and_images:
        what = f"{prompt!r} with {[i.shape for i in images]}"
        expected = transformers_processor(text=[prompt], images=images or None, return_tensors="np")
        expected = {k: np.asarray(v) for k, v in expected.items()}
        assert_same_inputs(mine(prompt, images), expected, what)


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


def test_janus_system_prompt_matches_transformers(tmp_path):
    """``use_default_system_prompt`` from a package's settings alone."""

    def with_system_prompt(processor):
        processor.use_default_system_prompt = True

    processor, mine = settings_only("janus", tmp_path, with_system_prompt)
    same_inputs(mine, processor, [("w5 <image_placeholder> w7", [random_image(SIZES[0])])])


def test_hybrid_images_without_resize_match_transformers(tmp_path):
    """Without ``do_resize`` both resolutions are the image as it is (nor padded)."""

    def without_resize(processor):
        processor.image_processor.do_resize = False

    processor, mine = settings_only("deepseek_vl_hybrid", tmp_path, without_resize)
    same_inputs(mine, processor, [(PROMPT, [random_image((16, 20))])])


def test_kimi_image_over_the_patch_budget_is_refused(tmp_path):
    """Shrinking is torchvision's bicubic resize, not reproduced: a one-line error says so."""

    def small_budget(processor):
        processor.image_processor.max_patches = 16

    _, mine = settings_only("kimi_k25", tmp_path, small_budget)
    with pytest.raises(MobiusError) as error:
        mine(mine.with_placeholders("w5", 1), [random_image((37, 45))])
    assert "an image of 37x45 pixels is over Kimi K2.5's patch budget" in str(error.value)
    assert "\n" not in str(error.value)


def test_generate_with_image_matches_transformers(built, image_file, capsys):
    assert_generate_with_image(built, image_file, capsys)


def test_generate_without_image_matches_transformers(built, capsys):
    assert_generate_without_image(built, capsys)


def test_placeholders_that_miscount_the_images_are_a_one_line_error(built, image_file, capsys):
    assert_miscounted_placeholders_fail(built, image_file, capsys)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("use_qk_norm", True, "janus: use_qk_norm is not supported"),
        ("depth", 0, "janus: vision_config.depth 0 is not a positive int"),
        ("projection_dim", 48, "projection_dim 48 differs from the text hidden_size 32"),
    ],
)
def test_a_janus_config_mobius_cannot_build_is_a_one_line_error(
    field, value, message, tmp_path, capsys
):
    _model_type, make_config, *_ = JANUS_CASES["janus-llama"]
    make_config().save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["vision_config"][field] = value
    path.write_text(json.dumps(config), encoding="utf-8")
    assert main(["info", str(tmp_path)]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert message in lines[0]
