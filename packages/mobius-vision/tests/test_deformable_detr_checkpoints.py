"""Deformable DETR checkpoints as the hub stores them, and the configs mobius refuses.

The hub's checkpoints name a timm ResNet-50 (``use_timm_backbone``, its maps at
``out_indices`` 2, 3, 4) with timm's tensor names, and hold every layer's class and box
head, some of them copies of the heads transformers ties. A tiny model rewritten that way
(timm resnet18, the heads copied and one made different) must build as the network
transformers loads from the same files.
"""

from __future__ import annotations

import json

import onnxruntime as ort
import pytest
from detection_parity_cases.deformable_detr import TINY_DEFORMABLE_DETR
from safetensors.numpy import load_file, save_file
from test_detection_backbones import timm_checkpoint
from transformers import AutoConfig, AutoModelForObjectDetection

from mobius.cli import main
from mobius.testing import PARITY_ATOL, build_with_cli
from mobius_vision.testing import compare_detection, detection_inputs, make_random_detector

#: transformers' ResNet with timm resnet18's sizes, at the three maps the hub's config reads.
RESNET18 = dict(
    model_type="resnet",
    embedding_size=64,
    hidden_sizes=[64, 128, 256, 512],
    depths=[2, 2, 2, 2],
    layer_type="basic",
    out_features=["stage2", "stage3", "stage4"],
)


def hub_heads(hf_dir) -> None:
    """Add the head copies a hub checkpoint holds beside the decoder's (``bbox_embed.N`` with
    box refinement), and a second layer's class head unlike the first (transformers keeps a
    tied head the checkpoint holds with other values)."""
    path = hf_dir / "model.safetensors"
    weights = load_file(path)
    decoder = "model.decoder.bbox_embed."
    weights.update(
        {k.removeprefix("model.decoder."): v for k, v in weights.items() if k.startswith(decoder)}
    )
    for name in ("weight", "bias"):
        weights[f"class_embed.1.{name}"] = weights[f"class_embed.0.{name}"][::-1].copy()
    save_file(weights, path, metadata={"format": "pt"})


def test_hub_layout_builds_as_transformers_loads_it(tmp_path):
    """timm's names and out_indices, the tied heads' copies: the graph equals transformers'
    model loaded from the same directory."""
    overrides = dict(TINY_DEFORMABLE_DETR, backbone_config=RESNET18, num_feature_levels=4)
    hf_config = AutoConfig.for_model("deformable_detr", **overrides, with_box_refine=True)
    source = tmp_path / "hf"
    make_random_detector(hf_config).save_pretrained(source)
    timm_checkpoint(source, "resnet18")
    hub_heads(source)
    saved = json.loads((source / "config.json").read_text())
    assert saved["use_timm_backbone"] and saved["backbone_config"] is None
    reference = AutoModelForObjectDetection.from_pretrained(source, attn_implementation="eager")
    assert reference.config.backbone_config.out_indices == [2, 3, 4]
    package = build_with_cli(source, tmp_path / "onnx")
    session = ort.InferenceSession(str(package / "model.onnx"), providers=["CPUExecutionProvider"])
    # 128 pixels: at 64 the last level is 1x1, where GroupNorm leaves transformers' own
    # float32 logits 0.15 from its float64 ones (measured)
    feeds = detection_inputs((128, 128), batch=2, seed=0, padded=True)
    diffs = compare_detection(reference.eval(), session, feeds)
    assert max(diffs.values()) <= PARITY_ATOL, diffs


def test_cpu_build_drops_a_backbone_stage_no_map_reads(tmp_path):
    """A ResNet whose last stage feeds no level: the ``--ep cpu`` passes remove its unread
    weights before the checkpoint is applied, which must not make its tensors unexpected."""
    unused_last_stage = dict(
        TINY_DEFORMABLE_DETR["backbone_config"], hidden_sizes=[8, 16, 16, 16], depths=[1] * 4
    )
    hf_config = AutoConfig.for_model(
        "deformable_detr", **dict(TINY_DEFORMABLE_DETR, backbone_config=unused_last_stage)
    )
    source = tmp_path / "hf"
    reference = make_random_detector(hf_config)
    reference.save_pretrained(source)
    package = build_with_cli(source, tmp_path / "onnx", "--ep", "cpu")
    session = ort.InferenceSession(str(package / "model.onnx"), providers=["CPUExecutionProvider"])
    feeds = detection_inputs((64, 64), batch=2, seed=1, padded=True)
    diffs = compare_detection(reference.eval(), session, feeds)
    assert max(diffs.values()) <= PARITY_ATOL, diffs


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (dict(d_model=48, encoder_ffn_dim=48), "does not split into 32 GroupNorm groups"),
        (dict(num_feature_levels=1), "the backbone returns 2 maps for num_feature_levels 1"),
        (
            dict(two_stage=True, with_box_refine=True, two_stage_num_proposals=0),
            "two_stage_num_proposals must be positive",
        ),
        (dict(decoder_n_points=0), "decoder_n_points must be positive"),
    ],
)
def test_unbuildable_configs_are_refused(changes, message, tmp_path, capsys):
    """Each is one line on stderr naming the setting (the config file edited as a stranger's
    could be)."""
    hf_dir = tmp_path / "hf"
    AutoConfig.for_model("deformable_detr", **TINY_DEFORMABLE_DETR).save_pretrained(hf_dir)
    config = json.loads((hf_dir / "config.json").read_text())
    (hf_dir / "config.json").write_text(json.dumps({**config, **changes}))
    code = main(["build", "--model", str(hf_dir), str(tmp_path / "out"), "--no-weights"])
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1 and message in err, err
