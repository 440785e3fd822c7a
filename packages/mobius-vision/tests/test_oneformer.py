"""OneFormer: ``mobius segment --task`` matches transformers, ``--validate`` checks the
task-conditioned graph, the training-only text mapper is dropped by name, and what mobius
cannot build is refused in one line.

A tiny random OneFormer over ResNet (every parameter perturbed) is saved with a tiny task
tokenizer (pad id not 0) and its PIL image processor, and built once with the CLI.
``mobius segment`` (through ``mobius.cli.main``) must give, for images of different sizes
and modes, what OneFormerProcessor, the PyTorch model and the processor's
``post_process_{semantic,panoptic,instance}_segmentation`` give (the pipeline's thresholds):
the class map for semantic (up to near-tied pixels, as the semantic runner's test), the
segment map and its segments' labels and scores for panoptic, and the same segments (ids
aside: transformers takes instances in ``topk(sorted=False)`` order) for instance.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from PIL import Image
from safetensors.numpy import load_file, save_file
from test_segmentation_runner import LABELS, TIE_MARGIN, segment_cli, write_images
from test_universal_segmentation_segment import refused
from transformers import AutoConfig
from universal_segmentation_parity_cases.maskformer import MASKFORMER
from universal_segmentation_parity_cases.oneformer import ONEFORMER

from mobius.errors import ConfigError, MobiusError
from mobius.testing import (
    assert_smoke_passes,
    assert_validation_fails,
    broken_copy,
    build_with_cli,
    perturb_parameters,
)
from mobius_vision.models.oneformer import TRAINING_ONLY, OneFormerConfig
from mobius_vision.processing.universal_segmentation import (
    PIPELINE_THRESHOLDS,
    instance_segments,
    panoptic_segments,
)
from mobius_vision.testing import make_random_segmenter
from mobius_vision.testing._universal_segmentation_parity import write_task_tokenizer
from mobius_vision.universal_segmentation_runner import UniversalSegmenter

SIZE = {"shortest_edge": 64, "longest_edge": 96}
MODEL_CLASS = "OneFormerForUniversalSegmentation"
#: The post-processing's threshold arguments, with the pipeline's values.
THRESHOLDS = dict(
    zip(
        ("threshold", "mask_threshold", "overlap_mask_area_threshold"),
        PIPELINE_THRESHOLDS,
        strict=True,
    )
)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """The semantic runner's test images (noise, tiny, JPEG, greyscale, RGBA, EXIF-rotated)."""
    return write_images(tmp_path_factory.mktemp("images"))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(model, OneFormerProcessor, package_dir, hf_dir)`` of a tiny OneFormer, built once
    (with ``--validate``)."""
    root = tmp_path_factory.mktemp("oneformer")
    config = AutoConfig.for_model(
        "oneformer", **ONEFORMER | {"id2label": LABELS, "num_labels": len(LABELS)}
    )
    # Seed 1: some queries pass the pipeline's 0.9 score threshold, and the class maps differ.
    model = make_random_segmenter(config, seed=1, model_class=MODEL_CLASS)
    hf_dir = root / "hf"
    model.save_pretrained(hf_dir)
    image_processor = transformers.OneFormerImageProcessorPil(size=SIZE)
    image_processor.save_pretrained(hf_dir)
    # Its instance post-processing reads the class-info file's name even in demo form.
    image_processor.class_info_file = ""
    tokenizer = write_task_tokenizer(hf_dir)
    processor = transformers.OneFormerProcessor(
        image_processor, tokenizer, task_seq_length=config.task_seq_len
    )
    return model, processor, build_with_cli(hf_dir, root / "onnx", "--validate"), hf_dir


def reference(model, processor, path: str, task: str):
    """OneFormerProcessor's inputs, the model's outputs and the processor's post-processing
    of ``task``, at the image's size."""
    image = transformers.image_utils.load_image(path)
    inputs = processor(images=[image], task_inputs=[task], return_tensors="pt")
    with torch.no_grad():
        outputs = model(pixel_values=inputs["pixel_values"], task_inputs=inputs["task_inputs"])
    size = [(image.height, image.width)]
    if task == "semantic":
        (result,) = processor.post_process_semantic_segmentation(
            outputs, target_sizes=size, return_segmentation_scores=True
        )
        return result
    post = getattr(processor, f"post_process_{task}_segmentation")
    (result,) = post(outputs, target_sizes=size, **THRESHOLDS)
    return result


def segment_all(capsys, package, images, folder, *options) -> list[tuple[str, np.ndarray]]:
    """One ``mobius segment`` over every image: each one's printed line and PNG."""
    code, lines = segment_cli(capsys, package, *images, *options, "--output", folder)
    assert code == 0 and len(lines) == len(images)
    masks = [np.asarray(Image.open(folder / f"{Path(p).stem}.png")) for p in images]
    return list(zip(lines, masks, strict=True))


def test_semantic_matches_the_processor(built, images, capsys, tmp_path):
    model, processor, package, _ = built
    seen = set()
    written = segment_all(capsys, package, images, tmp_path, "--task", "semantic")
    for path, (_, got) in zip(images, written, strict=True):
        want = reference(model, processor, path, "semantic")
        expected = want["segmentation"].numpy()
        top = np.sort(want["segmentation_scores"].numpy(), axis=0)
        differ = got != expected
        assert not (differ & (top[-1] - top[-2] > TIE_MARGIN)).any(), path
        seen.add(tuple(np.unique(expected)))
    assert len(seen) > 1, seen


def segments_by_pixels(segmentation: np.ndarray, segments) -> dict:
    """Each segment's ``(label, score)`` by the pixels it covers (ids left out)."""
    return {
        np.flatnonzero(segmentation == s["id"]).tobytes(): (s["label_id"], s["score"])
        for s in segments
    }


@pytest.mark.parametrize("task", ["panoptic", "instance"])
def test_segments_match_the_processor(task, built, images, capsys, tmp_path):
    model, processor, package, _ = built
    found = 0
    options = () if task == "panoptic" else ("--task", task)  # panoptic: the default
    written = segment_all(capsys, package, images, tmp_path, *options)
    for path, (line, got) in zip(images, written, strict=True):
        want = reference(model, processor, path, task)
        expected = np.maximum(want["segmentation"].numpy().astype(np.int64), 0)  # -1: none
        got = got.astype(np.int64)
        assert got.shape == expected.shape
        entries = [e for e in line.partition(": ")[2].split("; ") if e]
        got_segments = [
            {
                "id": int(e.split(":")[0]),
                "label_id": list(LABELS.values()).index(e.split(":")[1].rsplit(" ", 1)[0]),
                "score": float(e.rsplit(" ", 1)[1]),
            }
            for e in entries
        ]
        if task == "panoptic":
            np.testing.assert_array_equal(got, expected, err_msg=path)
            assert [(s["id"], s["label_id"]) for s in got_segments] == [
                (s["id"], s["label_id"]) for s in want["segments_info"]
            ]
        mine = segments_by_pixels(got, got_segments)
        theirs = segments_by_pixels(expected, want["segments_info"])
        assert mine.keys() == theirs.keys(), path
        for key, (label, score) in theirs.items():
            assert mine[key][0] == label and abs(mine[key][1] - score) <= 2e-6
        found += len(theirs)
    assert found, f"no {task} segment passes the thresholds: the test proves little"


@pytest.mark.parametrize("size", [(40, 24), (7, 5), (64, 100)])
def test_post_processing_matches_the_processor(size):
    """Random logits (masks enlarged and shrunk: torchvision's antialiasing), every query
    above the threshold or not: the processor's segments exactly."""
    from transformers.models.oneformer.modeling_oneformer import (
        OneFormerForUniversalSegmentationOutput as Output,
    )

    rng = np.random.default_rng(3)
    classes = rng.standard_normal((1, 9, 4)).astype(np.float32) * 4
    ys, xs = np.mgrid[0:10, 0:8] / 4.0  # ramps: masks with whole regions, not speckle
    slopes_y, slopes_x, offsets = rng.standard_normal((3, 9, 1, 1)) * 3
    masks = (slopes_y * (ys - 1.2) + slopes_x * (xs - 1) + offsets).astype(np.float32)[None]
    outputs = Output(
        class_queries_logits=torch.from_numpy(classes), masks_queries_logits=torch.from_numpy(masks)
    )
    processor = transformers.OneFormerImageProcessorPil()
    processor.class_info_file = ""  # read by its instance post-processing
    thresholds = (0.5, 0.5, 0.5)
    options = dict(zip(THRESHOLDS, thresholds, strict=True))
    for name, ours in (("panoptic", panoptic_segments), ("instance", instance_segments)):
        post = getattr(processor, f"post_process_{name}_segmentation")
        (want,) = post(outputs, target_sizes=[size], **options)
        segmentation, segments = ours(classes[0], masks[0], size, thresholds)
        expected = want["segmentation"].numpy().astype(np.int64)
        assert segments, name
        theirs = segments_by_pixels(expected, want["segments_info"])
        mine = segments_by_pixels(
            segmentation, [dict(id=s.id, label_id=s.label_id, score=s.score) for s in segments]
        )
        assert mine == theirs, name


def test_text_mapper_is_dropped_by_name_and_nothing_else(tmp_path, capsys):
    """A checkpoint with the training-only text mapper's tensors builds (they are
    :data:`TRAINING_ONLY`) and runs as transformers' inference model; a tensor of no known
    module still fails the build, naming it."""
    import onnxruntime as ort
    from transformers.models.oneformer.modeling_oneformer import OneFormerTextMapper

    from mobius.cli import main

    assert list(TRAINING_ONLY) == ["model.text_mapper.*"]
    config = AutoConfig.for_model(
        "oneformer", **ONEFORMER, text_encoder_width=64, text_encoder_num_layers=1
    )
    model = make_random_segmenter(config, model_class=MODEL_CLASS)
    hf_dir = tmp_path / "hf"
    model.save_pretrained(hf_dir)
    mapper = OneFormerTextMapper(config)
    perturb_parameters(mapper, 1)
    weights = load_file(hf_dir / "model.safetensors")
    extra = {f"model.text_mapper.{k}": v.numpy() for k, v in mapper.state_dict().items()}
    assert extra
    save_file({**weights, **extra}, hf_dir / "model.safetensors", metadata={"format": "pt"})
    package = build_with_cli(hf_dir, tmp_path / "onnx")
    pixels = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    tasks = np.array([[1, 3, 4, 5, 6, 2, 0, 0]], np.int64)
    session = ort.InferenceSession(str(package / "model.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(None, {"pixel_values": pixels, "task_inputs": tasks})
    with torch.no_grad():
        want = model(pixel_values=torch.from_numpy(pixels), task_inputs=torch.from_numpy(tasks))
    np.testing.assert_allclose(got[0], want.class_queries_logits.numpy(), atol=1e-4)

    save_file(
        {**weights, **extra, "model.stray.weight": np.zeros(2, np.float32)},
        hf_dir / "model.safetensors",
        metadata={"format": "pt"},
    )
    capsys.readouterr()
    assert main(["build", "--model", str(hf_dir), str(tmp_path / "stray"), "--quiet"]) != 0
    assert "model.stray.weight" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(backbone_config=dict(model_type="dinat")), "DiNAT"),
        (dict(pre_norm=True), "pre_norm"),
        (dict(hidden_dim=64), "input projections"),
        (dict(enforce_input_proj=True), "input projections"),
        (dict(mask_dim=16), "mask_dim"),
        (dict(layer_norm_eps=1e-6), "layer_norm_eps"),
        (dict(num_queries=1), "num_queries"),
    ],
)
def test_checkpoints_mobius_cannot_build_are_refused_in_one_line(overrides, message):
    """DiNAT (neighbourhood attention), a pre-norm decoder, input projections no checkpoint
    holds, mask features of another width, another LayerNorm epsilon, no object query."""
    config = AutoConfig.for_model("oneformer", **dict(ONEFORMER, **overrides))
    with pytest.raises(ConfigError, match=message) as error:
        OneFormerConfig.from_hf(config)
    assert "\n" not in str(error.value)


def test_task_refusals(built, images, capsys, tmp_path):
    """--task on a package without one, a task OneFormer does not know, a bad image."""
    _, _, package, _ = built
    with pytest.raises(MobiusError, match="not one of"):
        UniversalSegmenter(package, task="depth")
    assert "no image file at" in refused(capsys, package, tmp_path / "missing.png")
    text = tmp_path / "notes.png"
    text.write_text("not an image")
    assert "as an image" in refused(capsys, package, text, "--output", tmp_path / "m.png")
    config = AutoConfig.for_model("maskformer", **MASKFORMER)
    maskformer = make_random_segmenter(config, model_class="MaskFormerForInstanceSegmentation")
    maskformer.save_pretrained(tmp_path / "mf")
    transformers.MaskFormerImageProcessorPil(size=SIZE).save_pretrained(tmp_path / "mf")
    plain = build_with_cli(tmp_path / "mf", tmp_path / "mf-onnx")
    line = refused(capsys, plain, images[0], "--task", "panoptic")
    assert "--task is for packages that take a task" in line


def test_validate_feeds_the_task_and_fails_a_changed_weight(built, monkeypatch, tmp_path):
    """The build's ``--validate`` (the panoptic task's ids, the package's tokenizer) passed;
    a package with one changed weight fails; without torch the smoke run passes."""
    _, _, package, hf_dir = built
    validation = json.loads((package / "mobius.json").read_text())["validation"]
    assert validation["passed"] is True, validation
    assert validation["reference"] == f"transformers {MODEL_CLASS}"
    assert "panoptic task" in validation["checked"]
    assert max(validation["diffs"].values()) <= 1e-4
    broken = broken_copy(package, tmp_path / "broken", "model.onnx", "task_mlp.layers.0.0.weight")
    assert_validation_fails(broken, hf_dir)
    assert_smoke_passes(package, hf_dir, monkeypatch, tmp_path / "copy")
