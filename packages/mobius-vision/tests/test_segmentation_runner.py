"""``mobius segment`` on semantic-segmentation packages matches transformers' pipeline.

A tiny random SegFormer, UperNet, BEiT and DPT (every parameter perturbed) are each saved
with its PIL image processor (SegFormer's 64x64 resize, BEiT's and DPT's own) and built once with the CLI.
``mobius segment`` (through ``mobius.cli.main``) must write, for images of different sizes and modes (smaller and
larger than the logits' grid, greyscale, transparent, EXIF-rotated), the class map
transformers' ``image-segmentation`` pipeline gives: every pixel the same class, except
where the reference's two best upsampled logits lie closer than the graph's own error
(:data:`TIE_MARGIN`), and print the classes present with the pipeline's pixel shares.
The numpy pre- and post-processing are checked against the image processor on their own.
"""

from __future__ import annotations

import numpy as np
import pytest
import transformers
from depth_parity_cases.dpt import DPT
from PIL import Image
from segmentation_parity_cases.beit import BEIT
from segmentation_parity_cases.segformer import SEGFORMER
from segmentation_parity_cases.upernet import CONVNEXT, UPERNET
from transformers import AutoConfig

from mobius.cli import main
from mobius.errors import MobiusError
from mobius.testing import build_with_cli
from mobius_vision.segmentation_runner import (
    SemanticSegmenter,
    segmentation_processor,
    upsampled_argmax,
)
from mobius_vision.testing import make_random_segmenter

LABELS = {0: "wall", 1: "sky", 2: "road", 3: "tree", 4: "car"}
#: Two logits closer than this may rank either way between ONNX Runtime and PyTorch.
TIE_MARGIN = 1e-4
IMAGE_SIZE = {"height": 64, "width": 64}


def write_images(folder) -> list[str]:
    """RGB noise (larger and smaller than the 16x16 logits), a JPEG gradient, greyscale, an
    RGBA PNG and a JPEG stored on its side (EXIF orientation 6)."""
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (50, 70, 3), dtype=np.uint8)).save(folder / "noise.png")
    Image.fromarray(rng.integers(0, 256, (11, 9, 3), dtype=np.uint8)).save(folder / "tiny.png")
    ramp = np.linspace(0, 255, 96)[None, :, None] * np.linspace(0.2, 1, 80)[:, None, None]
    gradient = np.clip(ramp * [1.0, 0.5, 0.8] + rng.normal(0, 20, (80, 96, 3)), 0, 255)
    Image.fromarray(gradient.astype(np.uint8)).save(folder / "gradient.jpg", quality=90)
    grey = rng.integers(0, 256, (30, 30), dtype=np.uint8)
    Image.fromarray(grey, mode="L").save(folder / "grey.png")
    rgba = rng.integers(0, 256, (36, 36, 4), dtype=np.uint8)
    Image.fromarray(rgba, mode="RGBA").save(folder / "transparent.png")
    sideways = Image.fromarray(rng.integers(0, 256, (24, 44, 3), dtype=np.uint8))
    exif = sideways.getexif()
    exif[0x0112] = 6
    sideways.save(folder / "sideways.jpg", exif=exif)
    names = ("noise.png", "tiny.png", "gradient.jpg", "grey.png", "transparent.png")
    return [str(folder / name) for name in (*names, "sideways.jpg")]


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return write_images(tmp_path_factory.mktemp("images"))


#: The families the runner is checked on: logits at a quarter of the image (SegFormer) and
#: at the image's size (UperNet).
MODELS = {
    "segformer": ("segformer", SEGFORMER, None),
    "upernet": (
        "upernet",
        UPERNET | {"backbone_config": CONVNEXT | {"model_type": "convnext"}},
        None,
    ),
    # BEiT's own processor (bicubic, mean and std 0.5), at the config's 32x32.
    "beit": ("beit", BEIT | {"use_relative_position_bias": True}, "BeitForSemanticSegmentation"),
    # DPT's own processor (mobius depth's), its logits at twice the last fused map.
    "dpt": ("dpt", DPT | {"initializer_range": 0.5}, "DPTForSemanticSegmentation"),
}
#: Each family's image processor (transformers' PIL backend), saved beside the model.
PROCESSORS = {
    "segformer": lambda: transformers.SegformerImageProcessorPil(size=IMAGE_SIZE),
    "upernet": lambda: transformers.SegformerImageProcessorPil(size=IMAGE_SIZE),
    "beit": lambda: transformers.BeitImageProcessorPil(
        size={"height": 32, "width": 32}, do_center_crop=False
    ),
    "dpt": lambda: transformers.DPTImageProcessorPil(size={"height": 32, "width": 32}),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def built(request, tmp_path_factory):
    """``(hf_dir, package_dir, image processor)`` of a tiny segmenter, built once per family."""
    root = tmp_path_factory.mktemp(request.param)
    model_type, overrides, model_class = MODELS[request.param]
    overrides = overrides | {"id2label": LABELS, "num_labels": len(LABELS)}
    config = AutoConfig.for_model(model_type, **overrides)
    model = make_random_segmenter(config, model_class=model_class)
    hf_dir = root / "hf"
    model.save_pretrained(hf_dir)
    processor = PROCESSORS[request.param]()
    processor.save_pretrained(hf_dir)
    return hf_dir, build_with_cli(hf_dir, root / "onnx"), processor


def segment_cli(capsys, *args) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(["segment", *map(str, args)])
    return code, capsys.readouterr().out.splitlines()


def reference(pipe, path: str, **pipeline_options) -> tuple[np.ndarray, np.ndarray]:
    """The pipeline's class map of ``path`` and the top-two margin of its upsampled scores."""
    import torch

    image = transformers.image_utils.load_image(path)
    ids = {name: i for i, name in LABELS.items()}
    class_map = np.full((image.height, image.width), -1, np.int64)
    for entry in pipe(image, **pipeline_options):
        class_map[np.asarray(entry["mask"]) > 0] = ids[entry["label"]]
    assert (class_map >= 0).all(), "the pipeline's masks leave pixels out"
    inputs = pipe.image_processor(image, return_tensors="pt")
    with torch.no_grad():
        outputs = pipe.model(**inputs)
    (scores,) = pipe.image_processor.post_process_semantic_segmentation(
        outputs, target_sizes=[(image.height, image.width)], return_segmentation_scores=True
    )
    top = np.sort(scores["segmentation_scores"].numpy(), axis=0)
    return class_map, top[-1] - top[-2]


def assert_segment_matches_the_pipeline(
    hf_dir, package, images, capsys, tmp_path, **pipeline_options
) -> set[tuple[str, ...]]:
    """``mobius segment`` on each image gives the image-segmentation pipeline's class map
    (pixels may differ only where the top two scores are within TIE_MARGIN, on under 1% of
    the image) and its classes' shares; returns the class sets seen."""
    pipe = transformers.pipeline("image-segmentation", model=str(hf_dir))
    seen = set()
    for path in images:
        mask = tmp_path / "mask.png"
        code, lines = segment_cli(capsys, package, path, "--output", mask)
        assert code == 0
        expected, margin = reference(pipe, path, **pipeline_options)
        got = np.asarray(Image.open(mask))
        assert got.shape == expected.shape
        differ = got != expected
        assert not (differ & (margin > TIE_MARGIN)).any(), f"{path}: {differ.sum()} pixels differ"
        assert differ.mean() < 0.01, f"{path}: {differ.sum()} near-tied pixels differ"
        (line,) = lines
        shares = dict(pair.rsplit(" ", 1) for pair in line.partition(": ")[2].split("; "))
        counts = np.bincount(expected.reshape(-1), minlength=len(LABELS)) / expected.size
        want = {LABELS[i]: share for i, share in enumerate(counts) if share}
        assert set(shares) == set(want) or differ.any(), f"{path}: {shares} != {want}"
        for label, share in shares.items():
            assert abs(float(share) - want.get(label, 0.0)) <= differ.mean() + 1e-6
        seen.add(tuple(sorted(want)))
    return seen


def test_segment_matches_the_pipeline(built, images, capsys, tmp_path):
    hf_dir, package, _ = built
    seen = assert_segment_matches_the_pipeline(hf_dir, package, images, capsys, tmp_path)
    # A model that labels every image alike, or all of one class, would prove little.
    assert len(seen) > 1 and any(len(labels) > 1 for labels in seen), seen


def test_several_images_write_a_folder(built, images, capsys, tmp_path):
    _, package, _ = built
    code, lines = segment_cli(capsys, package, *images[:2], "--output", tmp_path / "masks")
    assert code == 0 and len(lines) == 2
    for path in images[:2]:
        name = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        assert (tmp_path / "masks" / f"{name}.png").is_file()


def test_pixels_match_the_image_processor(built, images):
    _, package, processor = built
    segmenter = SemanticSegmenter(package)
    from mobius_vision.processing._image import to_chw
    from mobius_vision.processing.classification import load_image

    for path in images:
        want = processor(transformers.image_utils.load_image(path), return_tensors="np")
        got = segmenter.processor(to_chw(load_image(path)))
        np.testing.assert_allclose(got, want["pixel_values"][0], atol=1e-6, rtol=0)


@pytest.mark.parametrize("size", [(64, 48), (7, 5), (16, 16), (33, 100)])
def test_upsampled_argmax_matches_post_processing(size):
    """Up, down and identity resizes of random logits: the processor's class map exactly."""
    import torch

    logits = np.random.default_rng(1).standard_normal((2, 6, 16, 12)).astype(np.float32)
    processor = transformers.SegformerImageProcessorPil()
    outputs = transformers.modeling_outputs.SemanticSegmenterOutput(logits=torch.from_numpy(logits))
    expected = processor.post_process_semantic_segmentation(outputs, target_sizes=[size, size])
    for row, want in zip(logits, expected, strict=True):
        np.testing.assert_array_equal(upsampled_argmax(row, size), want.numpy())


def refused(capsys, *args) -> str:
    """The one-line error ``mobius segment`` exits with."""
    capsys.readouterr()
    assert main(["segment", *map(str, args)]) != 0
    (line,) = capsys.readouterr().err.strip().splitlines()
    return line


def test_refusals(built, images, capsys, tmp_path):
    _, package, _ = built
    assert "no image file at" in refused(capsys, package, tmp_path / "missing.png")
    text = tmp_path / "notes.png"
    text.write_text("not an image")
    assert "as an image" in refused(capsys, package, text, "--output", tmp_path / "m.png")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no runner of 'mobius segment' accepts" in refused(capsys, empty, images[0])
    assert "a file; several images" in refused(capsys, package, *images[:2], "--output", text)
    # another kind of package's option is refused, not ignored
    for option, kind in (
        (("--task", "semantic"), "universal-segmentation packages"),
        (("--point", "1,2"), "Segment Anything packages"),
        (("--refine", "1"), "Segment Anything packages"),
        (("--labels", "a cat"), "text-prompted packages (CLIPSeg)"),
    ):
        line = refused(capsys, package, images[0], *option)
        assert f"{option[0]} applies to {kind}; {package} is not one (semantic-" in line
    with pytest.raises(MobiusError, match="no image processor like FancyImageProcessor"):
        segmentation_processor({"image_processor_type": "FancyImageProcessor"})
    with pytest.raises(MobiusError, match="size"):
        segmentation_processor({"image_processor_type": "SegformerImageProcessor", "size": "big"})
