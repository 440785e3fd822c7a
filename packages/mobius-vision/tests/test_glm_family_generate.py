"""GLM-4.6V (over its MoE decoder), GLM-GA and GLM-OCR packages: their processor and
``mobius generate``, against transformers.

Each family's tiny parity case (``vl_parity_cases/glm46v.py``, ``glm_ocr.py``) is made as a
random model with every parameter perturbed and saved with its real processor (over its
PIL image processor), then built once with the CLI (split form). Then:

- the package's torch-free processor gives the ids, pixels and grids transformers'
  processor gives (images wide, tall, small, over the pixel bound; two in a prompt; none),
  and the M-RoPE positions equal the torch model's ``get_rope_index``;
- ``mobius generate PKG PROMPT --image FILE`` and a text-only prompt print what
  transformers' greedy ``generate`` decodes;
- GLM-4.6V's experts are read fused (as transformers saves them) or one tensor each (as the
  hub holds GLM-V MoE checkpoints);
- GLM-GA's ``patch_expand_factor`` resizes as transformers' ``smart_resize`` does with the
  factor its default backend passes;
- GLM-OCR's and GLM-4.6V's multi-token-prediction layer in a checkpoint is ignored, not an
  error;
- ``mobius info`` names what a GLM-4.6V config builds, and a GLM-4.6V config over a decoder
  that is not GLM-V's is a one-line error.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from _vl_built import (
    BuiltVL,
    assert_generate_with_image,
    assert_generate_without_image,
    assert_processor_and_positions_match,
    built_fixture,
    save_processor,
)
from safetensors.numpy import load_file, save_file
from test_vl_generate import random_image
from transformers.models.glm4v.image_processing_pil_glm4v import smart_resize
from transformers.models.glmga.image_processing_pil_glmga import GlmgaImageProcessorPil
from vl_parity_cases.glm46v import CASES as GLM46V_CASES
from vl_parity_cases.glm_ocr import CASES as GLM_OCR_CASES

from mobius.cli import main
from mobius.testing import build_with_cli
from mobius_vision.processing import HF_PROCESSOR_FILE, processor_for

#: family -> its case
FAMILIES = {
    "glm46v": GLM46V_CASES["glm46v-moe-two-sizes"],
    "glmga": GLM46V_CASES["glmga-dense-two-sizes"],
    "glm_ocr": GLM_OCR_CASES["glm_ocr-biased-head-dim"],
}
# wide, tall, a side under one merge block (scaled up first), over the pixel bound
SIZES = ((37, 45), (45, 20), (5, 30), (70, 50))


built = built_fixture(FAMILIES)


def test_processor_and_positions_match_transformers(built):
    assert_processor_and_positions_match(built)


def test_generate_with_image_matches_transformers(built, image_file, capsys):
    assert_generate_with_image(built, image_file, capsys)


def test_generate_without_image_matches_transformers(built, capsys):
    assert_generate_without_image(built, capsys)


def test_glmga_patch_expand_factor_resizes_as_transformers(tmp_path):
    """The resize of transformers' default (torchvision) backend: multiples of
    ``patch * merge * patch_expand_factor`` (its ``smart_resize``, which the PIL backend
    calls with the factor left out)."""
    _model_type, make_config, make_processor, _options = FAMILIES["glmga"]
    config = make_config()
    processor = make_processor(config)
    config.save_pretrained(tmp_path)
    save_processor(processor, tmp_path)
    settings = json.loads((tmp_path / "processor_config.json").read_text())
    settings["image_processor"]["patch_expand_factor"] = 2
    (tmp_path / HF_PROCESSOR_FILE).write_text(json.dumps(settings))
    mine = processor_for(tmp_path, "glmga")
    image = processor.image_processor
    assert isinstance(image, GlmgaImageProcessorPil)
    factor = image.patch_size * image.merge_size * 2
    for height, width in SIZES:
        want = smart_resize(
            num_frames=image.temporal_patch_size,
            height=height,
            width=width,
            factor=factor,
            temporal_factor=image.temporal_patch_size,
            min_pixels=image.size["shortest_edge"],
            max_pixels=image.size["longest_edge"],
        )
        assert mine.resized_size(height, width) == want, (height, width)
    grid = mine(mine.with_placeholders("w5", 1), [random_image((37, 45))])["image_grid_thw"]
    assert grid[0, 1] % 4 == 0 and grid[0, 2] % 4 == 0  # whole 2x2 blocks of merge blocks


@pytest.mark.parametrize("family", ["glm_ocr", "glm46v"])
def test_multi_token_prediction_layer_is_ignored(family, tmp_path_factory, capsys):
    """GLM-OCR's and GLM's MoE checkpoints carry ``layers.{num_hidden_layers}`` (multi-token
    prediction), which transformers ignores: so does the build; a tensor past it is still
    refused."""
    case = BuiltVL(FAMILIES[family], tmp_path_factory.mktemp(f"{family}_mtp"), family)
    layers = case.model.config.text_config.num_hidden_layers
    (weights_file,) = case.hf.glob("*.safetensors")
    weights = load_file(weights_file)
    extra = np.ones((4, 4), np.float32)
    mtp = dict(weights, **{f"model.language_model.layers.{layers}.eh_proj.weight": extra})
    save_file(mtp, weights_file, metadata={"format": "pt"})
    build_with_cli(case.hf, case.hf.parent / "with-mtp", "--form", "split")
    beyond = dict(mtp, **{f"model.language_model.layers.{layers + 1}.eh_proj.weight": extra})
    save_file(beyond, weights_file, metadata={"format": "pt"})
    capsys.readouterr()
    with pytest.raises(RuntimeError, match="mobius build failed"):
        build_with_cli(case.hf, case.hf.parent / "beyond-mtp", "--form", "split")
    error = capsys.readouterr().err
    assert f"unexpected (1): language_model.model.layers.{layers + 1}.eh_proj.weight" in error


@pytest.mark.parametrize("built", ["glm46v"], indirect=True)
def test_glm46v_reads_per_expert_checkpoints_too(built, tmp_path, capsys):
    """transformers saves GLM-4.6V's experts fused; the hub's GLM-V MoE checkpoints hold one
    tensor per expert: the same weights either way build the same package."""
    (weights_file,) = built.hf.glob("*.safetensors")
    per_expert = {}
    for name, array in load_file(weights_file).items():
        prefix, _, leaf = name.rpartition(".")
        if not prefix.endswith(".mlp.experts"):
            per_expert[name] = array
            continue
        for e, rows in enumerate(array):
            parts = {"down_proj": rows}
            if leaf == "gate_up_proj":
                parts = dict(zip(("gate_proj", "up_proj"), np.split(rows, 2), strict=True))
            for part, value in parts.items():
                per_expert[f"{prefix}.{e}.{part}.weight"] = np.ascontiguousarray(value)
    assert len(per_expert) > len(load_file(weights_file))  # the case has fused experts
    hub = tmp_path / "hub"
    shutil.copytree(built.hf, hub, ignore=shutil.ignore_patterns("*.safetensors"))
    save_file(per_expert, hub / weights_file.name, metadata={"format": "pt"})
    package = build_with_cli(hub, tmp_path / "split", "--form", "split")
    capsys.readouterr()
    for directory in (built.package, package):
        assert main(["generate", str(directory), "w5 w7 w9", "--max-new-tokens", "8"]) == 0
    fused, split = capsys.readouterr().out.splitlines()
    assert split == fused


def test_info_names_what_a_glm46v_config_builds(tmp_path, capsys):
    _model_type, make_config, _make_processor, _options = FAMILIES["glm46v"]
    make_config().save_pretrained(tmp_path)
    capsys.readouterr()
    assert main(["info", str(tmp_path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["model_type"] == "glm46v"
    assert info["task"] == "vision-language"
    assert "mobius-vision" in json.dumps(info)


def test_glm46v_over_another_decoder_is_a_one_line_error(tmp_path, capsys):
    _model_type, make_config, _make_processor, _options = FAMILIES["glmga"]
    config = make_config().to_dict()
    config["text_config"]["model_type"] = "glm4"
    (tmp_path / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    assert main(["build", "--model", str(tmp_path), str(tmp_path / "out"), "--quiet"]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "text_config.model_type 'glm4' is not a GLM-V decoder" in lines[0]
