"""``mobius segment`` on universal-segmentation packages (MaskFormer, Mask2Former) matches
transformers.

A tiny random MaskFormer and Mask2Former (every parameter perturbed) are each saved with
its PIL image processor (shortest edge 64, longest 96, sides rounded up to a multiple of 32)
and built once with the CLI. ``mobius segment`` (through ``mobius.cli.main``) must write, for images of
different sizes and modes, the class map of transformers' ``image-segmentation`` pipeline
(``subtask="semantic"``: the processor's ``post_process_semantic_segmentation``): every
pixel the same class, except where the reference's two best upsampled scores lie closer
than the graph's own error (``TIE_MARGIN`` of test_segmentation_runner.py, whose check this
shares). The numpy pre- and post-processing are
checked against the image processor on their own.
"""

from __future__ import annotations

import numpy as np
import pytest
import transformers
from test_segmentation_runner import LABELS, assert_segment_matches_the_pipeline, write_images
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

SIZE = {"shortest_edge": 64, "longest_edge": 96}


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """The semantic runner's test images (noise, tiny, JPEG, greyscale, RGBA, EXIF-rotated)."""
    return write_images(tmp_path_factory.mktemp("images"))


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


def test_segment_matches_the_pipeline(built, images, capsys, tmp_path):
    hf_dir, package, _ = built
    seen = assert_segment_matches_the_pipeline(
        hf_dir, package, images, capsys, tmp_path, subtask="semantic"
    )
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
