"""The backbones mobius puts under DETR, against transformers' own ``XxxBackbone``.

Each case builds the backbone module mobius registers for the config's ``model_type``
(its ``backbone_class``), fills it with a perturbed transformers backbone's weights and
compares every feature map on two random images (max abs diff <= 1e-4). A DETR checkpoint
naming a timm ResNet (the hub's layout) must build as the same network.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnxruntime as ort
import pytest
from detection_parity_cases._tiny import RESNET_BACKBONE, TINY_DETR
from transformers import AutoConfig

from mobius.testing import PARITY_ATOL, build_with_cli
from mobius_vision.models._detr import BACKBONE_PREFIX
from mobius_vision.models.resnet import timm_to_transformers_name
from mobius_vision.testing import compare_detection, detection_inputs, make_random_detector
from mobius_vision.testing._segmentation_parity import check_backbone_parity

CASES = {
    "resnet-basic-last-stage": dict(RESNET_BACKBONE, image_size=32),
    "resnet-bottleneck-every-map": dict(
        RESNET_BACKBONE,
        layer_type="bottleneck",
        hidden_sizes=[16, 32, 48],
        depths=[1, 2, 1],
        out_features=["stem", "stage1", "stage2", "stage3"],
        downsample_in_bottleneck=True,
        image_size=40,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_backbone_parity(case, tmp_path):
    overrides = dict(CASES[case])
    hf_config = AutoConfig.for_model(overrides.pop("model_type"), **overrides)
    result = check_backbone_parity(hf_config, tmp_path)
    assert len(result.diffs) == len(hf_config.out_features)


def timm_checkpoint(hf_dir: Path, name: str) -> None:
    """Rewrite a saved DETR with a transformers ResNet backbone as the hub stores DETR: the
    config names a timm backbone (``use_timm_backbone``), the tensors carry timm's names."""
    from safetensors.numpy import load_file, save_file

    config = json.loads((hf_dir / "config.json").read_text())
    config.update(backbone_config=None, use_timm_backbone=True, backbone=name)
    (hf_dir / "config.json").write_text(json.dumps(config))
    weights = load_file(hf_dir / "model.safetensors")
    ours = {timm_to_transformers_name(timm): timm for timm in TIMM_NAMES_OF_RESNET18}
    renamed = {}
    for key, value in weights.items():
        rest = key.removeprefix(BACKBONE_PREFIX)
        renamed[BACKBONE_PREFIX + ours[rest] if rest != key else key] = value
    save_file(renamed, hf_dir / "model.safetensors", metadata={"format": "pt"})


#: Every tensor name of timm's resnet18 (stem, two blocks per stage, a downsample from stage 2).
TIMM_NAMES_OF_RESNET18 = [
    f"{module}.{tensor}"
    for module in [
        "conv1",
        "bn1",
        *(
            f"layer{stage}.{block}.{part}"
            for stage in range(1, 5)
            for block in range(2)
            for part in ("conv1", "bn1", "conv2", "bn2")
        ),
        *(f"layer{stage}.0.downsample.{i}" for stage in range(2, 5) for i in range(2)),
    ]
    for tensor in (
        ("weight",)
        if module.split(".")[-1].startswith("conv") or module.endswith("downsample.0")
        else ("weight", "bias", "running_mean", "running_var")
    )
]


def test_timm_resnet_checkpoint_maps_onto_resnet(tmp_path):
    """A DETR whose checkpoint names a timm resnet18 (as the hub's table-transformer and
    DETR checkpoints do) builds as transformers' ResNet and gives the outputs of the same
    network with transformers' backbone."""
    overrides = dict(
        TINY_DETR,
        backbone_config=dict(
            model_type="resnet",
            embedding_size=64,
            hidden_sizes=[64, 128, 256, 512],
            depths=[2, 2, 2, 2],
            layer_type="basic",
            out_features=["stage4"],
        ),
    )
    hf_config = AutoConfig.for_model("detr", **overrides)
    torch_model = make_random_detector(hf_config)
    source = tmp_path / "hf"
    torch_model.save_pretrained(source)
    timm_checkpoint(source, "resnet18")
    package = build_with_cli(source, tmp_path / "onnx")
    session = ort.InferenceSession(str(package / "model.onnx"), providers=["CPUExecutionProvider"])
    feeds = detection_inputs((64, 64), batch=2, seed=0, padded=True)
    compare = compare_detection(torch_model, session, feeds)
    assert max(compare.values()) <= PARITY_ATOL, compare


@pytest.mark.parametrize(
    ("timm_settings", "message"),
    [
        (
            dict(backbone="efficientnet_b0"),
            "timm backbone 'efficientnet_b0' is not one mobius maps",
        ),
        (dict(backbone="resnet50", dilation=True), "with a dilated last stage is not supported"),
    ],
)
def test_unmapped_timm_backbones_are_refused(timm_settings, message, tmp_path, capsys):
    """A timm backbone mobius cannot map is refused in one line that names it."""
    from mobius.cli import main

    config = AutoConfig.for_model("detr", use_timm_backbone=True, **timm_settings)
    config.save_pretrained(tmp_path / "hf")
    code = main(["build", "--model", str(tmp_path / "hf"), str(tmp_path / "out"), "--no-weights"])
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1 and message in err, err
