"""``mobius build --validate`` on Grounding DINO: a tiny model passes, a broken package fails.

A tiny random Grounding DINO (Swin backbone) is built with ``--validate`` through the CLI
against ``AutoModelForZeroShotObjectDetection`` (run in float64, its BERT with SDPA: see
:mod:`mobius_vision.testing._grounded_detection_parity`); a copy with one changed weight of
the decoder's box head must fail, and without torch both graphs still run (a smoke run).
"""

from __future__ import annotations

import json

import pytest
from transformers import AutoConfig
from zero_shot_detection_parity_cases.grounding_dino import TINY_GROUNDING_DINO, TINY_SWIN

from mobius.cli import main
from mobius.testing import assert_smoke_passes, assert_validation_fails, broken_copy
from mobius_vision.testing._grounded_detection_parity import make_random_grounded_detector

#: The bar of these float32 tiny models (the parity tests').
ATOL = 1e-4


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("grounding-dino")
    config = dict(TINY_GROUNDING_DINO, backbone_config=TINY_SWIN)
    model = make_random_grounded_detector(AutoConfig.for_model("grounding-dino", **config))
    model.save_pretrained(root / "hf")
    out = root / "out"
    assert main(["build", "--model", str(root / "hf"), str(out), "-q", "--validate"]) == 0
    return root / "hf", out


def test_detector_validates(built):
    _, out = built
    validation = json.loads((out / "mobius.json").read_text())["validation"]
    assert validation["passed"] is True, validation
    assert validation["reference"] == "transformers GroundingDinoForObjectDetection"
    assert {"text_features", "logits", "pred_boxes"} <= set(validation["diffs"])
    assert max(validation["diffs"].values()) <= ATOL, validation


def test_detector_with_a_changed_weight_fails(built, tmp_path):
    source, out = built
    broken = broken_copy(out, tmp_path / "broken", "image/model.onnx", "bbox_embed.0.layers.2")
    assert_validation_fails(broken, source)


def test_detector_smoke_run(built, monkeypatch, tmp_path):
    source, out = built
    assert_smoke_passes(out, source, monkeypatch, tmp_path / "copy")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(two_stage=False), "two_stage=False"),
        (dict(d_model=48, encoder_attention_heads=4, decoder_attention_heads=4), "multiple of 32"),
        (dict(text_config=dict(model_type="roberta")), "is not BERT"),
    ],
)
def test_unbuilt_variants_are_refused(overrides, message, tmp_path, capsys):
    config = AutoConfig.for_model(
        "grounding-dino", **dict(TINY_GROUNDING_DINO, backbone_config=TINY_SWIN, **overrides)
    )
    config.save_pretrained(tmp_path / "hf")
    argv = ["build", "--model", str(tmp_path / "hf"), str(tmp_path / "out"), "--no-weights"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_hub_checkpoint_layout_builds(built, tmp_path):
    """The hub's checkpoints (converted by older transformers) also hold every layer's copy of
    the shared box head, the decoder's copies, Swin's index buffers and BERT's position ids:
    the build reads what it needs and ignores those by name."""
    import shutil

    import numpy as np
    from safetensors.numpy import load_file, save_file

    source = shutil.copytree(built[0], tmp_path / "hub")
    weights = load_file(source / "model.safetensors")
    copies = {}
    for name, value in weights.items():
        if name.startswith("bbox_embed.0."):
            second = name.replace("bbox_embed.0.", "bbox_embed.1.")
            copies.update({second: value, f"model.decoder.{name}": value})
            copies[f"model.decoder.{second}"] = value
    backbone = "model.backbone.conv_encoder.model.encoder.layers.0.blocks.0"
    copies[f"{backbone}.attention.self.relative_position_index"] = np.zeros((4, 4), np.int64)
    copies["model.text_backbone.embeddings.position_ids"] = np.arange(32)[None]
    save_file({**weights, **copies}, str(source / "model.safetensors"), metadata={"format": "pt"})
    assert main(["build", "--model", str(source), str(tmp_path / "out"), "-q"]) == 0
