"""Synthetic parity of mobius-vision's segmentation families against PyTorch.

Each case (see ``segmentation_parity_cases/``) makes a tiny random HF model with every
parameter perturbed, builds it with the CLI path at the size its saved
``preprocessor_config.json`` names, and checks ``logits`` at fp32 on a batch of two random
images (max abs diff <= 1e-4, relative above a scale of 1) for ``--ep default`` and ``cpu``.
The dense backbones the heads reuse (ConvNeXt, Swin) are checked against transformers'
``AutoBackbone`` on their own.
"""

from __future__ import annotations

import pytest
from segmentation_parity_cases import all_cases
from transformers import AutoConfig

from mobius_vision.testing import check_backbone_parity, check_semantic_segmentation_parity

CASES = all_cases()
BACKBONE_CASES = all_cases("BACKBONE_CASES")


@pytest.mark.parametrize("case", sorted(CASES))
def test_semantic_segmentation_parity(case, tmp_path):
    model_type, overrides, *options = CASES[case]
    hf_config = AutoConfig.for_model(model_type, **overrides)
    results = check_semantic_segmentation_parity(
        hf_config, tmp_path, **(options[0] if options else {})
    )
    assert results and all(r.diffs for r in results)


@pytest.mark.parametrize("case", sorted(BACKBONE_CASES))
def test_backbone_parity(case, tmp_path):
    model_type, overrides = BACKBONE_CASES[case]
    result = check_backbone_parity(AutoConfig.for_model(model_type, **overrides), tmp_path)
    assert result.diffs


def test_every_segmentation_type_has_a_parity_case():
    """Every registered key of the semantic-segmentation task (a model type or an
    architecture class) has a case here."""
    import json
    from importlib.resources import files

    registrations = json.loads(files("mobius_vision").joinpath("registrations.json").read_text())
    # a case names its model type, or the architecture class registered by itself
    covered = {model_type for model_type, *_ in CASES.values()}
    covered |= {options.get("model_class") for _, _, *rest in CASES.values() for options in rest}
    segmenters = {
        key for key, entry in registrations.items() if entry["task"] == "semantic-segmentation"
    }
    assert segmenters, "no semantic-segmentation type is registered"
    assert not segmenters - covered, f"no parity case for {sorted(segmenters - covered)}"


def test_build_size_comes_from_the_image_processor(tmp_path):
    """The build's size is the processor's fixed ``height``/``width``; none without one; a
    stranger's wrong value is refused in one line."""
    import json

    from mobius.errors import ConfigError
    from mobius_vision.tasks.semantic_segmentation import processor_image_size

    settings = tmp_path / "preprocessor_config.json"
    assert processor_image_size(tmp_path) is None
    for size, expected in (
        ({"height": 40, "width": 56}, (40, 56)),
        (96, (96, 96)),
        ({"shortest_edge": 800}, None),
    ):
        settings.write_text(json.dumps({"size": size}))
        assert processor_image_size(tmp_path) == expected
    settings.write_text(json.dumps({"size": {"height": 32, "width": 32}, "do_resize": False}))
    assert processor_image_size(tmp_path) is None
    for bad in (
        {"height": -1, "width": 8},
        {"height": 8.5, "width": 8},
        {"height": True, "width": 8},
    ):
        settings.write_text(json.dumps({"size": bad}))
        with pytest.raises(ConfigError, match="is not a pair of sides"):
            processor_image_size(tmp_path)
    settings.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read"):
        processor_image_size(tmp_path)


def test_checkpoints_mobius_cannot_build_are_refused_in_one_line():
    """A SegFormer classifier (no decode head), a UperNet over a timm backbone (weights
    mobius does not map), a Swin v2 backbone (none built yet), BEiT reading three layers."""
    from transformers import TimmBackboneConfig

    from mobius.errors import ConfigError
    from mobius_vision.models.beit_segmentation import BeitSegmentationConfig
    from mobius_vision.models.segformer import SegformerConfig
    from mobius_vision.models.upernet import UperNetConfig

    classifier = AutoConfig.for_model(
        "segformer", architectures=["SegformerForImageClassification"]
    )
    with pytest.raises(ConfigError, match="has no decode head"):
        SegformerConfig.from_hf(classifier)
    timm = AutoConfig.for_model("upernet", backbone_config=TimmBackboneConfig(backbone="x"))
    with pytest.raises(ConfigError, match="timm"):
        UperNetConfig.from_hf(timm)
    swinv2 = AutoConfig.for_model(
        "upernet", backbone_config=dict(model_type="swinv2", out_features=["stage1"])
    )
    with pytest.raises(ConfigError, match="no swinv2 backbone"):
        UperNetConfig.from_hf(swinv2)
    with pytest.raises(ConfigError, match="out_indices"):
        BeitSegmentationConfig.from_hf(AutoConfig.for_model("beit", out_indices=[1, 2, 3]))


def _one_case_per_key() -> dict[str, tuple]:
    """The first case of each registered key (a model type, or its architecture class)."""
    first: dict[str, tuple] = {}
    for model_type, overrides, *rest in CASES.values():
        options = rest[0] if rest else {}
        first.setdefault(options.get("model_class") or model_type, (model_type, overrides, options))
    return first


@pytest.mark.parametrize("key", sorted(_one_case_per_key()))
def test_f16_build_loads_in_onnx_runtime(key, tmp_path):
    """A float32 constant multiplied into float16 activations (pooling and resizing weights)
    fails only when ONNX Runtime type-checks the f16 graph: each family's f16 build loads."""
    import onnxruntime as ort

    from mobius.cli import main
    from mobius_vision.testing._segmentation_parity import write_preprocessor_config

    model_type, overrides, options = _one_case_per_key()[key]
    config = AutoConfig.for_model(model_type, **overrides)
    if options.get("model_class"):
        config.architectures = [options["model_class"]]
    config.save_pretrained(tmp_path / "hf")
    write_preprocessor_config(tmp_path / "hf", options["image_size"], "SegformerImageProcessor")
    out = tmp_path / "f16"
    argv = ["build", "--model", str(tmp_path / "hf"), str(out), "--no-weights", "--quiet"]
    assert main([*argv, "--dtype", "f16", "--runtime", "onnx"]) == 0
    ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
