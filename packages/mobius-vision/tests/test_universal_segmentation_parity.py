"""Synthetic parity of mobius-vision's universal-segmentation families (MaskFormer) against
PyTorch.

Each case (see ``universal_segmentation_parity_cases/``) makes a tiny random HF model with
every parameter perturbed, builds it with the CLI path, and checks ``class_queries_logits``
and ``masks_queries_logits`` at fp32 on a batch of two random images (max abs diff <= 1e-4,
relative above a scale of 1) for ``--ep default`` and ``cpu``.
"""

from __future__ import annotations

import pytest
from transformers import AutoConfig, TimmBackboneConfig
from universal_segmentation_parity_cases import CASES
from universal_segmentation_parity_cases.mask2former import MASK2FORMER
from universal_segmentation_parity_cases.mask2former import RESNET as RESNET2
from universal_segmentation_parity_cases.mask2former import SWIN as SWIN2
from universal_segmentation_parity_cases.maskformer import MASKFORMER, SWIN

from mobius.errors import ConfigError
from mobius_vision.testing import check_universal_segmentation_parity


@pytest.mark.parametrize("case", sorted(CASES))
def test_universal_segmentation_parity(case, tmp_path):
    model_type, overrides, options = CASES[case]
    hf_config = AutoConfig.for_model(model_type, **overrides)
    results = check_universal_segmentation_parity(hf_config, tmp_path, **options)
    assert results and all(r.diffs for r in results)


def test_every_universal_segmentation_type_has_a_parity_case():
    import json
    from importlib.resources import files

    registrations = json.loads(files("mobius_vision").joinpath("registrations.json").read_text())
    registered = {k for k, e in registrations.items() if e["task"] == "universal-segmentation"}
    assert registered, "no universal-segmentation type is registered"
    missing = registered - {model_type for model_type, *_ in CASES.values()}
    assert not missing, f"no parity case for {sorted(missing)}"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(backbone_config=dict(SWIN, depths=[2, 2], num_heads=[1, 2])), "all four stages"),
        (dict(backbone_config=dict(SWIN, use_absolute_embeddings=True)), "use_absolute"),
        (
            dict(backbone_config=dict(SWIN, model_type="maskformer-swin", out_features=["stem"])),
            "stem",
        ),
        (dict(backbone_config=TimmBackboneConfig(backbone="resnet50")), "timm"),
        (dict(use_auxiliary_loss=True), "use_auxiliary_loss"),
        (dict(fpn_feature_size=48), "GroupNorm"),
    ],
)
def test_checkpoints_mobius_cannot_build_are_refused_in_one_line(overrides, message):
    """A Swin backbone of other than four stages (transformers takes four maps of it), or
    with an absolute position table, or MaskFormer's Swin asked for its stem; a timm backbone,
    the training form, an FPN width GroupNorm(32) cannot split."""
    from mobius_vision.models.maskformer import MaskFormerConfig

    config = AutoConfig.for_model("maskformer", **dict(MASKFORMER, **overrides))
    with pytest.raises(ConfigError, match=message) as error:
        MaskFormerConfig.from_hf(config)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(pre_norm=True), "pre_norm"),
        (dict(backbone_config=dict(RESNET2, out_features=["stage3", "stage4"])), "3 or more"),
        (dict(feature_strides=[4, 8, 12, 32]), "powers of two"),
        (dict(feature_size=48), "32 groups"),
    ],
)
def test_mask2former_checkpoints_mobius_cannot_build_are_refused_in_one_line(overrides, message):
    """A pre-norm decoder, two maps (the pixel decoder reads three), strides the FPN cannot
    count in halvings, a width GroupNorm(32) cannot split."""
    from mobius_vision.models.mask2former import Mask2FormerConfig

    config = AutoConfig.for_model("mask2former", **dict(MASK2FORMER, **overrides))
    with pytest.raises(ConfigError, match=message) as error:
        Mask2FormerConfig.from_hf(config)
    assert "\n" not in str(error.value)


#: Each family, and over Swin (whose any-size graph makes its shift masks itself).
F16_CASES = {
    "maskformer": ("maskformer", MASKFORMER),
    "mask2former": ("mask2former", MASK2FORMER),
    "maskformer-swin": ("maskformer", dict(MASKFORMER, backbone_config=SWIN)),
    "mask2former-swin": ("mask2former", dict(MASK2FORMER, backbone_config=SWIN2)),
}


@pytest.mark.parametrize("case", sorted(F16_CASES))
def test_f16_build_loads_in_onnx_runtime(case, tmp_path):
    """Float32 constants in float16 graphs (positions, the attention mask's bias) fail only
    when ONNX Runtime type-checks the graph: each family's f16 build loads."""
    import onnxruntime as ort

    from mobius.cli import main

    model_type, overrides = F16_CASES[case]
    AutoConfig.for_model(model_type, **overrides).save_pretrained(tmp_path / "hf")
    out = tmp_path / "f16"
    argv = ["build", "--model", str(tmp_path / "hf"), str(out), "--no-weights", "--quiet"]
    assert main([*argv, "--dtype", "f16", "--runtime", "onnx"]) == 0
    ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
