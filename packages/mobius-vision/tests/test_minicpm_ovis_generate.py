"""MiniCPM-V / Ovis2 packages: their torch-free processor and ``mobius generate``, against
transformers.

Each family's tiny parity case (``vl_parity_cases/<family>.py``) is made as a random model
with every parameter perturbed and saved with its real processor (over its PIL image
processor), then built once with the CLI (split form). Then:

- the package's processor (:mod:`mobius_vision.processing`) gives the ids and pixels
  transformers' processor gives (images wide, tall, small, large; two in a prompt; none),
  and MiniCPM-V 4.7's canvas M-RoPE positions equal the torch model's ``get_rope_index``;
- ``mobius generate PKG PROMPT --image FILE`` and a text-only prompt print what
  transformers' greedy ``generate`` decodes;
- Ovis2's other tilings (by aspect ratio; none) are checked from a package's settings alone;
- placeholders that miscount the images are a one-line error.
"""

from __future__ import annotations

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
from vl_parity_cases.minicpm_ocr import CASES as MINICPM_OCR_CASES
from vl_parity_cases.minicpmv4_6 import CASES as MINICPMV4_6_CASES
from vl_parity_cases.minicpmv4_7 import CASES as MINICPMV4_7_CASES
from vl_parity_cases.ovis2 import CASES as OVIS2_CASES
from vl_parity_cases.ovis2 import ovis2_processor

from mobius.cli import main
from mobius_vision.processing import HF_PROCESSOR_FILE, processor_for

#: family -> its case
FAMILIES = {
    "minicpmv4_6": MINICPMV4_6_CASES["minicpmv4_6-slices-window-merger"],
    "minicpm_ocr": MINICPM_OCR_CASES["minicpm_ocr-4x-tied"],
    "minicpmv4_7": MINICPMV4_7_CASES["minicpmv4_7-canvas-mrope"],
    "ovis2": OVIS2_CASES["ovis2-qwen2-tiles-stride-2"],
}
# wide, tall, small (MiniCPM scales it up), large (more slices)
SIZES = ((37, 45), (45, 20), (5, 30), (70, 50))


built = built_fixture(FAMILIES)


def cases_of(prompt: str, mine) -> list[tuple[str, list]]:
    """A prompt with an image of each size, two images in one prompt, and no image."""
    cases = [(prompt, [random_image(size, i)]) for i, size in enumerate(SIZES)]
    two = [random_image(SIZES[0], 7), random_image(SIZES[1], 8)]
    return [*cases, (mine.with_placeholders("w5 w7", 2), two), ("w5 w7 w9", [])]


def test_processor_and_positions_match_transformers(built):
    """The inputs, and MiniCPM-V 4.7's canvas positions against the model's own."""
    mine = processor_for(built.package, built.family)
    rope = built.options.get("rope_positions")
    for prompt, images in cases_of(built.prompt, mine):
        what = f"{prompt!r} {len(images)} images"
        expected = {k: np.asarray(v) for k, v in built.hf_inputs(prompt, images).items()}
        expected.pop("grids", None)  # Ovis2's tile layout, which the model does not read
        got = mine(prompt, images)
        assert_same_inputs(got, expected, what)
        if rope is None or not images:  # text only: plain positions
            assert mine.rope_positions(got) is None, what
            continue
        positions, deltas = mine.rope_positions(got)
        want_positions, want_deltas = rope(built.model, expected)
        np.testing.assert_array_equal(positions, want_positions, err_msg=what)
        np.testing.assert_array_equal(deltas, want_deltas, err_msg=what)


def test_generate_with_image_matches_transformers(built, image_file, capsys):
    assert_generate_with_image(built, image_file, capsys)


def test_generate_without_image_matches_transformers(built, capsys):
    assert_generate_without_image(built, capsys)


@pytest.mark.parametrize(
    "settings", [dict(use_covering_area_grid=False), dict(crop=False)], ids=["aspect", "whole"]
)
def test_ovis2_other_tilings_match_transformers(settings, tmp_path):
    """Tiles by the closest aspect ratio, and images left whole, from a package's settings."""
    _model_type, make_config, _make_processor, _options = FAMILIES["ovis2"]
    config = make_config()
    processor = ovis2_processor(crop=settings.pop("crop", True))(config)
    for name, value in settings.items():
        setattr(processor.image_processor, name, value)
    config.save_pretrained(tmp_path)
    save_processor(processor, tmp_path)
    (tmp_path / "processor_config.json").rename(tmp_path / HF_PROCESSOR_FILE)
    mine = processor_for(tmp_path, "ovis2")
    for prompt, images in cases_of("w5 <image>w7", mine):
        expected = dict(processor(text=[prompt], images=images or None, return_tensors="np"))
        expected = {k: np.asarray(v) for k, v in expected.items() if k != "grids"}
        assert_same_inputs(mine(prompt, images), expected, f"{prompt!r} {len(images)} images")


def test_placeholders_that_miscount_the_images_are_a_one_line_error(built, image_file, capsys):
    assert_miscounted_placeholders_fail(built, image_file, capsys)


@pytest.mark.parametrize(
    ("family", "change", "message"),
    [
        ("ovis2", dict(vision_config=dict(hidden_stride=3)), "hidden_stride 3 must divide"),
        ("minicpmv4_6", dict(downsample_mode="8x"), "downsample_mode '8x' is not 16x or 4x"),
        ("minicpmv4_6", dict(insert_layer_id=2), "insert_layer_id 2 is not a layer"),
        ("minicpmv4_7", dict(newline_id=None), "newline_id None is not a token id"),
    ],
)
def test_a_config_mobius_cannot_build_is_a_one_line_error(
    family, change, message, tmp_path, capsys
):
    import json

    FAMILIES[family][1]().save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    config = json.loads(path.read_text())
    for key, value in change.items():
        if isinstance(value, dict):
            config[key].update(value)
        else:
            config[key] = value
    path.write_text(json.dumps(config))
    assert main(["info", str(tmp_path)]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert message in lines[0]


def test_minicpm_ocr_small_image_upsize_from_the_settings(tmp_path):
    """``"never"`` keeps a small image's own size (transformers' resize rule without
    upscaling); ``"adaptive"`` (OpenCV's glyph measure) is a one-line error."""
    from mobius.errors import MobiusError

    _model_type, make_config, make_processor, _options = FAMILIES["minicpm_ocr"]
    config = make_config()
    processor = make_processor(config)
    config.save_pretrained(tmp_path)
    image = random_image(SIZES[2], 3)  # 5x30: unsliced, small
    for mode in ("never", "adaptive"):
        processor.image_processor.small_image_upsize = mode
        save_processor(processor, tmp_path)
        (tmp_path / "processor_config.json").replace(tmp_path / HF_PROCESSOR_FILE)
        mine = processor_for(tmp_path, "minicpm_ocr")
        if mode == "adaptive":
            with pytest.raises(MobiusError, match="small_image_upsize 'adaptive'"):
                mine("w5 <image>", [image])
            continue
        got = mine("w5 <image>", [image])["target_sizes"].tolist()
        h, w = processor.image_processor.find_best_resize(
            SIZES[2], 32, 4, downsample_mode="4x", allow_upscale=False
        )
        assert got == [[h // 4, w // 4]]
        upscaled = processor.image_processor.find_best_resize(
            SIZES[2], 32, 4, downsample_mode="4x", allow_upscale=True
        )
        assert (h, w) != upscaled  # the setting changes the size
