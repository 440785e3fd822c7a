"""``mobius segment`` on a SAM 2 package matches transformers' processor, model and post-processing.

The tiny random SAM 2 of :mod:`sam_parity_cases.sam2` (every parameter perturbed) is saved
with a ``processor_config.json`` of ``Sam2Processor`` at the model's 64-pixel size and
built once with the CLI. transformers' ``Sam2ImageProcessor`` needs torchvision, which the
workspace does not install: the reference pixels come from transformers' PIL backend with
the same settings (``ViTImageProcessorPil``: resize to 64x64 bilinear, rescale, ImageNet
normalisation, which is all ``Sam2ImageProcessor`` does to an image), the prompts from
transformers' own ``Sam2Processor`` around it, the masks from ``Sam2Model`` and
``post_process_masks``' one step (bilinear to the original size, threshold 0). With
``--refine N``, N more ``forward`` calls with the best low-resolution mask as
``input_masks``; the object score logit printed is the last call's.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import transformers
from PIL import Image
from sam_parity_cases.sam2 import SAM2_OVERRIDES
from test_sam_segment import (
    PROMPTS,
    REFINE,
    prompt_inputs,
    refined_forward,
    segment_images,
    write_images,
)
from transformers import AutoConfig

from mobius.errors import ConfigError, MobiusError
from mobius.testing import build_with_cli
from mobius_vision.models.sam2 import Sam2Config
from mobius_vision.sam_runner import IMAGENET_DEFAULT, MaskGenerator, Sam2ImageProcessor
from mobius_vision.testing import make_random_sam

SIZE = 64
#: Reference logits this close to the threshold may binarise either way.
EDGE = 1e-4
#: (width, height) of the test images: landscape and portrait, the aspect ratio not kept.
IMAGE_SETTINGS = {
    "do_resize": True,
    "size": {"height": SIZE, "width": SIZE},
    "resample": 2,  # bilinear
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": list(IMAGENET_DEFAULT[0]),
    "image_std": list(IMAGENET_DEFAULT[1]),
}


class PilSam2ImageProcessor(transformers.ViTImageProcessorPil):
    """``Sam2ImageProcessor``'s image steps on transformers' PIL backend (no torchvision),
    with the ``original_sizes`` that ``Sam2Processor`` reads."""

    def __call__(self, images, segmentation_maps=None, **kwargs):
        out = super().__call__(images, **kwargs)
        out["original_sizes"] = [[images.height, images.width]]
        return out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(torch model, processor, package)``, built once."""
    root = tmp_path_factory.mktemp("sam2")
    model = make_random_sam(AutoConfig.for_model("sam2", **SAM2_OVERRIDES), "Sam2Model")
    model.save_pretrained(root / "hf")
    settings = {
        "image_processor": {**IMAGE_SETTINGS, "image_processor_type": "Sam2ImageProcessor"},
        "processor_class": "Sam2Processor",
        "target_size": SIZE,
    }
    (root / "hf" / "processor_config.json").write_text(json.dumps(settings))
    settings = {k: v for k, v in IMAGE_SETTINGS.items() if k != "do_resize"}
    processor = transformers.Sam2Processor(image_processor=PilSam2ImageProcessor(**settings))
    return model, processor, build_with_cli(root / "hf", root / "onnx")


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return write_images(tmp_path_factory.mktemp("sam2-images"), seed=2)


def reference_masks(model, processor, path, points, labels, box, refine: int = 0):
    """transformers' mask logits (at the image's size), IoU scores and object score logit
    for one prompt (``refine``: :func:`test_sam_segment.refined_forward`)."""
    import torch.nn.functional as F

    inputs = prompt_inputs(processor, path, points, labels, box)
    arguments = {k: v for k, v in inputs.items() if k.startswith("input_")}
    out = refined_forward(model, inputs["pixel_values"], arguments, refine)
    # Sam2ImageProcessor.post_process_masks: bilinear to the original size, no crop
    original = tuple(inputs["original_sizes"][0])
    logits = F.interpolate(out.pred_masks[0], original, mode="bilinear", align_corners=False)
    return logits[0].numpy(), out.iou_scores[0, 0].numpy(), float(out.object_score_logits[0, 0])


@pytest.mark.parametrize(
    ("prompt", "refine"),
    [(prompt, 0) for prompt in sorted(PROMPTS)] + [("point_and_box", REFINE)],
)
def test_segment_matches_transformers(prompt, refine, built, images, capsys, tmp_path):
    model, processor, package = built
    points, labels, box = PROMPTS[prompt]
    lines = segment_images(capsys, package, images, prompt, refine, tmp_path)
    for path, line in zip(images, lines, strict=True):
        logits, scores, object_score = reference_masks(
            model, processor, path, points, labels, box, refine
        )
        best = int(scores.argmax())
        listed = " ".join(f"{score:.4f}" for score in scores)
        expected_line = f"{path}: mask {best} of {len(scores)} (IoU scores {listed})"
        assert line.startswith(f"{expected_line} object score {object_score:.4f} -> "), line
        written = np.asarray(Image.open(tmp_path / f"{path.rsplit('/', 1)[1][:-4]}.png")) > 127
        expected = logits[best] > 0
        assert written.shape == expected.shape
        differ = written != expected
        assert not (differ & (np.abs(logits[best]) > EDGE)).any(), f"{differ.sum()} pixels differ"
        assert 0 < expected.sum() < expected.size, "a trivial mask proves little"


def test_refined_scores_match_transformers(built, images):
    """``refine=N``: the last run's IoU scores and object score logit within 1e-5 of
    transformers' same steps, and different from the first run's."""
    model, processor, package = built
    generator = MaskGenerator(package)
    points, labels, box = PROMPTS["point"]
    for path in images[:1]:  # the CLI test refines both
        refined = generator.predict(path, points, labels, box, refine=REFINE)
        _, scores, object_score = reference_masks(
            model, processor, path, points, labels, box, REFINE
        )
        np.testing.assert_allclose(refined.iou_scores, scores, atol=1e-5, rtol=0)
        assert abs(refined.object_score - object_score) <= 1e-5
        first = generator.predict(path, points, labels, box)
        assert np.abs(first.iou_scores - refined.iou_scores).max() > 1e-3


def test_pixels_and_coordinates_match_the_processor(built, images):
    """The numpy preprocessing gives the processor's pixels and scaled prompts."""
    _, processor, package = built
    ours = MaskGenerator(package).processor
    assert isinstance(ours, Sam2ImageProcessor)
    for path in images:
        image = Image.open(path).convert("RGB")
        inputs = processor(
            images=image,
            input_points=[[[[30.0, 20.0]]]],
            input_labels=[[[1]]],
            input_boxes=[[[5.0, 8.0, 33.0, 50.0]]],
            return_tensors="np",
        )
        pixels, resized = ours.pixels(np.asarray(image).transpose(2, 0, 1))
        np.testing.assert_allclose(pixels, inputs["pixel_values"][0], atol=1e-6, rtol=0)
        assert tuple(resized) == (SIZE, SIZE)
        original = (image.height, image.width)
        np.testing.assert_allclose(
            ours.scale_coordinates(np.array([[30.0, 20.0]]), original),
            inputs["input_points"].reshape(-1, 2),
            rtol=1e-6,
        )
        np.testing.assert_allclose(
            ours.scale_coordinates(np.array([[5.0, 8.0], [33.0, 50.0]]), original).reshape(-1),
            inputs["input_boxes"].reshape(-1),
            rtol=1e-6,
        )


def test_bad_processor_settings_are_refused():
    with pytest.raises(MobiusError, match="resizes to a square"):
        Sam2ImageProcessor({"size": {"height": 64, "width": 32}}, {})
    with pytest.raises(MobiusError, match="target_size"):
        Sam2ImageProcessor({}, {"target_size": "64"})


@pytest.mark.parametrize(
    ("section", "change", "message"),
    [
        (
            "vision_config",
            {"backbone_feature_sizes": [[8, 8], [4, 4], [2, 2]]},
            "backbone_feature_sizes",
        ),
        ("vision_config", {"backbone_channel_list": [40, 32, 16, 24]}, "backbone_channel_list"),
        ("vision_config", {"fpn_hidden_size": 32}, "fpn_hidden_size"),
        ("prompt_encoder_config", {"patch_size": 8}, "do not match the prompt encoder"),
    ],
)
def test_bad_config_is_refused(section, change, message):
    """A config whose parts do not fit together is a one-line ConfigError naming the part."""
    overrides = {**SAM2_OVERRIDES, section: {**SAM2_OVERRIDES[section], **change}}
    with pytest.raises(ConfigError, match=message):
        Sam2Config.from_hf(AutoConfig.for_model("sam2", **overrides))
