"""``mobius segment`` on universal-segmentation packages (MaskFormer, Mask2Former) matches
transformers.

A tiny random MaskFormer and Mask2Former (every parameter perturbed) are each saved with
its PIL image processor (shortest edge 64, longest 96, sides rounded up to a multiple of 32)
and built once with the CLI. ``mobius segment`` (through ``mobius.cli.main``) must write, for images of
different sizes and modes, the class map of transformers' ``image-segmentation`` pipeline
(``subtask="semantic"``: the processor's ``post_process_semantic_segmentation``): every
pixel the same class, except where the reference's two best upsampled scores lie closer
than the graph's own error (:data:`TIE_MARGIN`). The numpy pre- and post-processing are
checked against the image processor on their own.
"""

from __future__ import annotations

import numpy as np
import pytest
import transformers
from PIL import Image
from transformers import AutoConfig
from universal_segmentation_parity_cases.mask2former import MASK2FORMER
from universal_segmentation_parity_cases.maskformer import MASKFORMER

from mobius.cli import main
from mobius.errors import MobiusError
from mobius.testing import build_with_cli
from mobius_vision.processing._image import to_chw
from mobius_vision.processing.classification import load_image
from mobius_vision.testing import make_random_segmenter
from mobius_vision.universal_segmentation_runner import (
    MaskFormerProcessor,
    UniversalSegmenter,
    semantic_scores,
)

LABELS = {0: "wall", 1: "sky", 2: "road", 3: "tree", 4: "car"}
#: Two scores closer than this may rank either way between ONNX Runtime and PyTorch.
TIE_MARGIN = 1e-4
SIZE = {"shortest_edge": 64, "longest_edge": 96}


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """RGB noise, a tiny image, a JPEG gradient, greyscale, RGBA, and a JPEG stored on its
    side (EXIF orientation 6)."""
    folder = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (50, 70, 3), dtype=np.uint8)).save(folder / "noise.png")
    Image.fromarray(rng.integers(0, 256, (11, 9, 3), dtype=np.uint8)).save(folder / "tiny.png")
    ramp = np.linspace(0, 255, 96)[None, :, None] * np.linspace(0.2, 1, 80)[:, None, None]
    gradient = np.clip(ramp * [1.0, 0.5, 0.8] + rng.normal(0, 20, (80, 96, 3)), 0, 255)
    Image.fromarray(gradient.astype(np.uint8)).save(folder / "gradient.jpg", quality=90)
    Image.fromarray(rng.integers(0, 256, (30, 30), dtype=np.uint8), mode="L").save(
        folder / "grey.png"
    )
    rgba = rng.integers(0, 256, (36, 36, 4), dtype=np.uint8)
    Image.fromarray(rgba, mode="RGBA").save(folder / "transparent.png")
    sideways = Image.fromarray(rng.integers(0, 256, (24, 44, 3), dtype=np.uint8))
    exif = sideways.getexif()
    exif[0x0112] = 6
    sideways.save(folder / "sideways.jpg", exif=exif)
    names = ("noise.png", "tiny.png", "gradient.jpg", "grey.png", "transparent.png")
    return [str(folder / name) for name in (*names, "sideways.jpg")]


#: Each family: (model type, overrides, model class, its PIL image processor).
MODELS = {
    "maskformer": (
        "maskformer",
        MASKFORMER,
        "MaskFormerForInstanceSegmentation",
        transformers.MaskFormerImageProcessorPil,
    ),
    # Its post-processing resizes the mask logits to 384x384 before the product.
    "mask2former": (
        "mask2former",
        MASK2FORMER,
        "Mask2FormerForUniversalSegmentation",
        transformers.Mask2FormerImageProcessorPil,
    ),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def built(request, tmp_path_factory):
    """``(hf_dir, package_dir, image processor)`` of a tiny model, built once per family."""
    root = tmp_path_factory.mktemp(request.param)
    model_type, overrides, model_class, processor_class = MODELS[request.param]
    overrides = overrides | {"id2label": LABELS, "num_labels": len(LABELS)}
    config = AutoConfig.for_model(model_type, **overrides)
    model = make_random_segmenter(config, model_class=model_class)
    hf_dir = root / "hf"
    model.save_pretrained(hf_dir)
    processor = processor_class(size=SIZE)
    processor.save_pretrained(hf_dir)
    return hf_dir, build_with_cli(hf_dir, root / "onnx"), processor


def segment_cli(capsys, *args) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(["segment", *map(str, args)])
    return code, capsys.readouterr().out.splitlines()


def reference(pipe, path: str) -> tuple[np.ndarray, np.ndarray]:
    """The pipeline's semantic class map of ``path`` and the top-two margin of its scores."""
    import torch

    image = transformers.image_utils.load_image(path)
    ids = {name: i for i, name in LABELS.items()}
    class_map = np.full((image.height, image.width), -1, np.int64)
    for entry in pipe(image, subtask="semantic"):
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


def test_segment_matches_the_pipeline(built, images, capsys, tmp_path):
    hf_dir, package, _ = built
    pipe = transformers.pipeline("image-segmentation", model=str(hf_dir))
    seen = set()
    for path in images:
        mask = tmp_path / "mask.png"
        code, lines = segment_cli(capsys, package, path, "--output", mask)
        assert code == 0
        expected, margin = reference(pipe, path)
        got = np.asarray(Image.open(mask))
        assert got.shape == expected.shape
        differ = got != expected
        assert not (differ & (margin > TIE_MARGIN)).any(), f"{path}: {differ.sum()} pixels differ"
        (line,) = lines
        shares = dict(pair.rsplit(" ", 1) for pair in line.partition(": ")[2].split("; "))
        counts = np.bincount(expected.reshape(-1), minlength=len(LABELS)) / expected.size
        want = {LABELS[i]: share for i, share in enumerate(counts) if share}
        assert set(shares) == set(want) or differ.any(), f"{path}: {shares} != {want}"
        for label, share in shares.items():
            assert abs(float(share) - want.get(label, 0.0)) <= differ.mean() + 1e-6
        seen.add(tuple(sorted(want)))
    # A model that labels every image with one class would prove little.
    assert any(len(labels) > 1 for labels in seen), seen


def test_pixels_match_the_image_processor(built, images):
    _, package, processor = built
    segmenter = UniversalSegmenter(package)
    for path in images:
        want = processor(transformers.image_utils.load_image(path), return_tensors="np")
        got, _ = segmenter.processor(to_chw(load_image(path)))
        assert got.shape == want["pixel_values"][0].shape
        np.testing.assert_allclose(got, want["pixel_values"][0], atol=1e-6, rtol=0)


@pytest.mark.parametrize("family", sorted(MODELS))
def test_semantic_scores_match_post_processing(family):
    """The class-mask product of random logits (Mask2Former's masks resized to 384x384
    first), as the family's processor computes it before resizing to an image."""
    import torch
    from transformers.models.maskformer.modeling_maskformer import (
        MaskFormerForInstanceSegmentationOutput as Output,
    )

    rng = np.random.default_rng(1)
    classes = rng.standard_normal((2, 7, 5)).astype(np.float32) * 3
    masks = rng.standard_normal((2, 7, 6, 9)).astype(np.float32) * 3
    outputs = Output(
        class_queries_logits=torch.from_numpy(classes), masks_queries_logits=torch.from_numpy(masks)
    )
    processor = MODELS[family][3]()
    expected = processor.post_process_semantic_segmentation(
        outputs, return_segmentation_scores=True
    )
    mask_size = MaskFormerProcessor.from_dict(
        {"image_processor_type": type(processor).__name__}
    ).mask_size
    for c, m, want in zip(classes, masks, expected, strict=True):
        got = semantic_scores(c, m, mask_size)
        np.testing.assert_allclose(got, want["segmentation_scores"].numpy(), atol=1e-5)
        np.testing.assert_array_equal(got.argmax(0), want["segmentation"].numpy())


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
    with pytest.raises(MobiusError, match="no universal-segmentation image processor like Fancy"):
        MaskFormerProcessor.from_dict({"image_processor_type": "FancyImageProcessor"})
    with pytest.raises(MobiusError, match="size_divisor"):
        MaskFormerProcessor.from_dict(
            {"image_processor_type": "MaskFormerImageProcessor", "size_divisor": -3}
        )
    with pytest.raises(MobiusError, match="is not a universal-segmentation package"):
        UniversalSegmenter(tmp_path)
