"""``mobius segment`` on universal-segmentation packages over Swin matches transformers.

MaskFormer's processor resizes each image by its shortest edge, so the graph takes images of
any size: here a tiny random MaskFormer over Swin and a Mask2Former over transformers' Swin
(every parameter perturbed), each saved as hub checkpoints are (:func:`as_hub_saves_it`) and
built once with the CLI.
``mobius segment`` (through ``mobius.cli.main``) must write, for images of different shapes
(so different input sizes, every Swin stage padded to its windows), the class map of
transformers' ``image-segmentation`` pipeline (``subtask="semantic"``), as
test_universal_segmentation_segment.py checks it for ResNet backbones.
"""

from __future__ import annotations

import json

import pytest
import transformers
from test_segmentation_runner import LABELS, assert_segment_matches_the_pipeline, write_images
from test_universal_segmentation_segment import SIZE
from transformers import AutoConfig
from universal_segmentation_parity_cases.mask2former import MASK2FORMER
from universal_segmentation_parity_cases.mask2former import SWIN as SWIN_BACKBONE
from universal_segmentation_parity_cases.maskformer import MASKFORMER, SWIN

from mobius.testing import build_with_cli
from mobius_vision.testing import make_random_segmenter

#: Each family: (model type, overrides, model class, its PIL image processor).
MODELS = {
    "maskformer-swin": (
        "maskformer",
        dict(MASKFORMER, backbone_config=SWIN),
        "MaskFormerForInstanceSegmentation",
        transformers.MaskFormerImageProcessorPil,
    ),
    "mask2former-swin": (
        "mask2former",
        dict(MASK2FORMER, backbone_config=SWIN_BACKBONE),
        "Mask2FormerForUniversalSegmentation",
        transformers.Mask2FormerImageProcessorPil,
    ),
}


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """Landscape RGB noise and gradient, and a tiny portrait image: inputs of 64x96 and 96x64
    pixels (the other test images add modes, not sizes; PyTorch takes seconds on each)."""
    paths = write_images(tmp_path_factory.mktemp("images"))
    return [path for path in paths if path.endswith(("noise.png", "tiny.png", "gradient.jpg"))]


def as_hub_saves_it(hf_dir) -> None:
    """Rewrite a save as hub checkpoints are: transformers now saves MaskFormer's backbone as
    ``maskformer-swin``, hub configs name it ``swin`` (its out_features transformers' to
    choose); older transformers saved each window's ``relative_position_index`` buffer."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    path = hf_dir / "config.json"
    config = json.loads(path.read_text())
    backbone = config["backbone_config"]
    if backbone["model_type"] == "maskformer-swin":
        backbone.update(model_type="swin", out_features=None, out_indices=None)
        path.write_text(json.dumps(config))
    weights = load_file(hf_dir / "model.safetensors")
    window = backbone["window_size"] ** 2
    for name in [k for k in weights if k.endswith("relative_position_bias_table")]:
        index = name.replace("relative_position_bias_table", "relative_position_index")
        weights.setdefault(index, np.zeros((window, window), np.int64))
    save_file(weights, hf_dir / "model.safetensors", metadata={"format": "pt"})


@pytest.fixture(scope="module", params=sorted(MODELS))
def built(request, tmp_path_factory):
    """``(hf_dir, package_dir)`` of a tiny model, built once per family."""
    root = tmp_path_factory.mktemp(request.param)
    model_type, overrides, model_class, processor_class = MODELS[request.param]
    overrides = overrides | {"id2label": LABELS, "num_labels": len(LABELS)}
    model = make_random_segmenter(
        AutoConfig.for_model(model_type, **overrides), model_class=model_class
    )
    hf_dir = root / "hf"
    model.save_pretrained(hf_dir)
    processor_class(size=SIZE).save_pretrained(hf_dir)
    as_hub_saves_it(hf_dir)
    return hf_dir, build_with_cli(hf_dir, root / "onnx")


def test_segment_matches_the_pipeline(built, images, capsys, tmp_path):
    hf_dir, package = built
    seen = assert_segment_matches_the_pipeline(
        hf_dir, package, images, capsys, tmp_path, subtask="semantic"
    )
    # A model that labels every image with one class would prove little.
    assert any(len(labels) > 1 for labels in seen), seen
