"""HunYuan-VL packages: their processor and ``mobius generate``, against transformers.

The tiny parity case (``vl_parity_cases/hunyuan_vl.py``) is made as a random model with
every parameter perturbed and saved with its real processor (over its PIL image
processor), then built once with the CLI (split form). Then:

- the package's torch-free processor gives the ids, pixels and grids transformers'
  processor gives (images wide, tall, small, over the pixel bound; two in a prompt; none),
  and the 4-axis positions equal the torch model's ``get_rope_index``;
- ``mobius generate PKG PROMPT --image FILE`` and a text-only prompt print what
  transformers' greedy ``generate`` decodes; a prompt with more placeholders than images
  is a one-line error;
- ``mobius info`` names what a HunYuan-VL config builds; a config the tower cannot take is
  a one-line error.
"""

from __future__ import annotations

import json
import shutil

from _vl_built import (
    assert_generate_with_image,
    assert_generate_without_image,
    assert_miscounted_placeholders_fail,
    assert_processor_and_positions_match,
    built_fixture,
    random_image,
)
from vl_parity_cases.hunyuan_vl import CASES as HUNYUAN_VL_CASES

from mobius.cli import main
from mobius_vision.processing import processor_for

#: family -> its case
FAMILIES = {"hunyuan_vl": HUNYUAN_VL_CASES["hunyuan_vl-two-sizes-4-axes"]}
# wide, tall, a side under one merge block (scaled up), over the pixel bound
SIZES = ((37, 45), (45, 20), (5, 30), (70, 50))


built = built_fixture(FAMILIES)


def test_processor_and_positions_match_transformers(built):
    assert_processor_and_positions_match(built, axes=4)


def test_generate_with_image_matches_transformers(built, image_file, capsys):
    assert_generate_with_image(built, image_file, capsys)


def test_generate_without_image_matches_transformers(built, capsys):
    assert_generate_without_image(built, capsys)


def test_miscounted_placeholders_are_a_one_line_error(built, image_file, capsys):
    assert_miscounted_placeholders_fail(built, image_file, capsys)


def test_info_names_what_a_hunyuan_vl_config_builds(tmp_path, capsys):
    _model_type, make_config, _make_processor, _options = FAMILIES["hunyuan_vl"]
    make_config().save_pretrained(tmp_path)
    capsys.readouterr()
    assert main(["info", str(tmp_path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["model_type"] == "hunyuan_vl"
    assert info["task"] == "vision-language"
    assert "mobius-vision" in json.dumps(info)


def test_a_video_patch_tower_is_a_one_line_error(tmp_path, capsys):
    """The tower embeds one frame per patch: ``temporal_patch_size`` 2 is refused by name."""
    _model_type, make_config, _make_processor, _options = FAMILIES["hunyuan_vl"]
    config = make_config().to_dict()
    config["vision_config"]["temporal_patch_size"] = 2
    (tmp_path / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    assert main(["build", "--model", str(tmp_path), str(tmp_path / "out"), "--quiet"]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "temporal_patch_size 2 != 1" in lines[0]


def test_processor_reads_the_axes_of_a_hub_config(built, tmp_path):
    """HunyuanOCR's hub ``config.json`` is flat, its sections under ``rope_scaling`` as
    ``xdrope_section``: the processor gives that many position streams."""
    shutil.copytree(built.package, tmp_path / "pkg")
    config = json.loads((tmp_path / "pkg" / "config.json").read_text())
    config.pop("text_config")
    config["rope_scaling"] = {"type": "xdrope", "alpha": 1000.0, "xdrope_section": [2, 3, 3]}
    (tmp_path / "pkg" / "config.json").write_text(json.dumps(config))
    mine = processor_for(tmp_path / "pkg", built.family)
    inputs = mine(built.prompt, [random_image((37, 45))])
    positions, deltas = mine.rope_positions(inputs)
    assert positions.shape == (3, *inputs["input_ids"].shape)
    assert deltas.tolist() == [[0]]
