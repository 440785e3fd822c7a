"""``mobius detect`` matches transformers' object-detection pipeline on tiny random detectors.

Each case is a tiny random detector (every parameter perturbed) saved with its image
processor (transformers' PIL backend, resizing by shortest and longest edge), built once
with the CLI. ``mobius detect`` (through ``mobius.cli.main``) must print the boxes
transformers' ``object-detection`` pipeline finds in the same image files: the same
labels in the same order, scores within 1e-5, and corners within 1e-3 px of the image
processor's ``post_process_object_detection`` (the pipeline truncates them to ints).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
import transformers
from detection_parity_cases._tiny import TINY_DETR
from detection_parity_cases.deformable_detr import TINY_DEFORMABLE_DETR
from detection_parity_cases.yolos import YOLOS
from PIL import Image
from transformers import AutoConfig

from mobius.cli import main
from mobius.errors import MobiusError
from mobius.testing import build_with_cli
from mobius_vision.detection_runner import ObjectDetector
from mobius_vision.processing import detection as processing
from mobius_vision.testing import make_random_detector

SCORE_ATOL = 1e-5
BOX_ATOL = 1e-3
#: The CLI prints corners to two decimals.
PRINTED_BOX_ATOL = 0.005 + BOX_ATOL
LABELS = {0: "cat", 1: "remote control", 2: "couch"}
#: Small edges, so that every test image is resized (up or down, by either edge).
EDGES = dict(size={"shortest_edge": 40, "longest_edge": 56})

#: case -> (model_type, config, image processor): one per post-processing rule.
DETECTORS = {
    "detr": ("detr", TINY_DETR, lambda: transformers.DetrImageProcessorPil(**EDGES)),
    "conditional_detr": (
        "conditional_detr",
        TINY_DETR,
        lambda: transformers.ConditionalDetrImageProcessorPil(**EDGES),
    ),
    "yolos": ("yolos", YOLOS, lambda: transformers.YolosImageProcessorPil(**EDGES)),
    "deformable_detr": (
        "deformable_detr",
        TINY_DEFORMABLE_DETR,
        lambda: transformers.DeformableDetrImageProcessorPil(**EDGES),
    ),
}


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """A wide noise PNG (its longest edge limits the resize), a small JPEG (enlarged), a
    tall greyscale PNG, and a JPEG stored on its side (EXIF orientation 6)."""
    folder = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (30, 90, 3), dtype=np.uint8)).save(folder / "wide.png")
    ramp = np.linspace(0, 255, 24)[None, :, None] * np.linspace(0.2, 1, 20)[:, None, None]
    small = np.clip(ramp * [1.0, 0.5, 0.8] + rng.normal(0, 20, (20, 24, 3)), 0, 255)
    Image.fromarray(small.astype(np.uint8)).save(folder / "small.jpg", quality=90)
    tall = rng.integers(0, 256, (70, 45), dtype=np.uint8)
    Image.fromarray(tall, mode="L").save(folder / "tall.png")
    sideways = Image.fromarray(rng.integers(0, 256, (36, 52, 3), dtype=np.uint8))
    exif = sideways.getexif()
    exif[0x0112] = 6  # the pipeline turns it upright: 52 x 36
    sideways.save(folder / "sideways.jpg", exif=exif)
    return [str(folder / name) for name in ("wide.png", "small.jpg", "tall.png", "sideways.jpg")]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``built(case)``: ``(hf_dir, package_dir)`` of a case, made and built once per module."""
    root = tmp_path_factory.mktemp("detect")

    @functools.cache
    def build(case: str):
        model_type, overrides, processor = DETECTORS[case]
        hf_dir = root / f"hf-{case}"
        config = AutoConfig.for_model(model_type, **overrides, id2label=LABELS)
        make_random_detector(config).save_pretrained(hf_dir)
        processor().save_pretrained(hf_dir)
        return hf_dir, build_with_cli(hf_dir, root / f"onnx-{case}")

    return build


def detect_cli(capsys, *args) -> tuple[int, list[str], str]:
    capsys.readouterr()  # what came before (a build's report) is not the command's
    code = main(["detect", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def parse_line(line: str) -> tuple[str, str, float, list[float]]:
    """``path: label score x0 y0 x1 y1`` -> ``(path, label, score, corners)``."""
    path, _, rest = line.partition(": ")
    label, *numbers = rest.rsplit(" ", 5)
    return path, label, float(numbers[0]), [float(v) for v in numbers[1:]]


@functools.cache
def reference_model(hf_dir):
    """transformers' processor and model of a saved case."""
    processor = transformers.AutoImageProcessor.from_pretrained(hf_dir)
    return processor, transformers.AutoModelForObjectDetection.from_pretrained(hf_dir).eval()


def reference_detections(hf_dir, path: str, threshold: float) -> dict:
    """The processor's post-processed result for one image (float corners)."""
    processor, model = reference_model(hf_dir)
    image = transformers.image_utils.load_image(path)
    with torch.no_grad():
        outputs = model(**processor(images=[image], return_tensors="pt"))
    size = [(image.height, image.width)]
    return processor.post_process_object_detection(outputs, threshold, size)[0]


def middle_threshold(pipe, images) -> float:
    """A threshold that keeps some boxes and drops others (so the comparison tests both)."""
    scores = sorted(d["score"] for path in images for d in pipe(path, threshold=0.0))
    assert scores[-1] - scores[0] > 0.05, f"the boxes score alike: {scores}"
    return round(float(np.median(scores)), 4)


@pytest.mark.parametrize("case", sorted(DETECTORS))
def test_detect_matches_the_pipeline(case, built, images, capsys, tmp_path):
    hf_dir, package = built(case)
    pipe = transformers.pipeline("object-detection", model=str(hf_dir))
    threshold = middle_threshold(pipe, images)
    png = tmp_path / "boxes.png"

    code, lines, err = detect_cli(
        capsys, package, images[0], "--threshold", threshold, "--output", png
    )
    assert code == 0, err
    assert Image.open(png).size == Image.open(images[0]).size
    code, lines, err = detect_cli(capsys, package, *images, "--threshold", threshold)
    assert code == 0, err
    detector = ObjectDetector(package)
    kept = 0
    for path in images:
        expected = pipe(path, threshold=threshold)
        printed = [line for line in lines if line.startswith(f"{path}: ")]
        if not expected:
            assert printed == [f"{path}: no object scores above {threshold}"], printed
            continue
        mine = [parse_line(line) for line in printed]
        kept += len(expected)
        assert [m[1] for m in mine] == [e["label"] for e in expected]
        np.testing.assert_allclose(
            [m[2] for m in mine], [e["score"] for e in expected], atol=SCORE_ATOL, rtol=0
        )
        reference = reference_detections(hf_dir, path, threshold)["boxes"].numpy()
        np.testing.assert_allclose([m[3] for m in mine], reference, atol=PRINTED_BOX_ATOL, rtol=0)
        # The API's corners: within 1e-3 px of the processor's, and truncated as the pipeline's.
        found = detector.detect(path, threshold)
        boxes = np.asarray([d.box for d in found])
        np.testing.assert_allclose(boxes, reference, atol=BOX_ATOL, rtol=0)
        pipeline_ints = [[e["box"][k] for k in ("xmin", "ymin", "xmax", "ymax")] for e in expected]
        near_integer = np.abs(boxes - np.round(boxes)) < BOX_ATOL
        assert np.all((boxes.astype(int) == pipeline_ints) | near_integer)
    assert 0 < kept < len(pipe(images[0], threshold=0.0)) * len(images)


def test_pixels_match_the_processor(images):
    """The pixels and mask equal transformers' PIL processor's, exactly, for its defaults, a
    legacy lone-int size with max_size, a fixed pad_size (a mask with padding), max sides, and
    YOLOS's sides rounded to 16 (by the shortest edge and by the longest)."""
    image = transformers.image_utils.load_image(images[0])
    for name, settings in (
        ("DetrImageProcessor", {}),
        ("DeformableDetrImageProcessor", {}),
        ("DetrImageProcessor", {"size": 30, "max_size": 50}),
        ("DetrImageProcessor", {**EDGES, "pad_size": {"height": 64, "width": 64}}),
        (
            "DetrImageProcessor",
            {"size": {"max_height": 33, "max_width": 70}, "do_normalize": False},
        ),
        ("YolosImageProcessor", {"size": {"shortest_edge": 50, "longest_edge": 90}}),
        ("YolosImageProcessor", {"size": {"shortest_edge": 40, "longest_edge": 100}}),
    ):
        theirs = getattr(transformers, f"{name}Pil")(**settings)(image)
        raw = {"image_processor_type": f"{name}Pil", **settings}
        pre, _ = processing.detection_processing(raw)
        pixels, mask = pre(np.moveaxis(np.asarray(image), -1, 0))
        np.testing.assert_array_equal(pixels, theirs["pixel_values"][0], err_msg=str(settings))
        np.testing.assert_array_equal(mask, theirs["pixel_mask"][0], err_msg=str(settings))


def test_refusals(built, images, capsys, tmp_path):
    """Each is one line on stderr, exit code 1, and names the problem."""
    _, package = built("detr")
    not_an_image = tmp_path / "notes.png"
    not_an_image.write_text("not an image")
    refusals = {
        "cannot read": (package, not_an_image),
        "no image file at": (package, tmp_path / "missing.png"),
        "--threshold must be a number in [0, 1]": (package, images[0], "--threshold", "1.5"),
        "--output draws one image's boxes": (package, *images[:2], "--output", tmp_path / "x.png"),
        "accepts": (tmp_path, images[0]),
        f"--labels applies to zero-shot packages; {package} is not one (object-detection)": (
            package,
            images[0],
            "--labels",
            "a cat",
        ),
    }
    for message, args in refusals.items():
        code, lines, err = detect_cli(capsys, *args)
        assert code == 1 and not lines, (message, err)
        assert len(err.strip().splitlines()) == 1 and message in err, err


def test_bad_processor_settings_are_refused():
    for raw, message in (
        ({"image_processor_type": "LevitImageProcessor"}, "no image processor like"),
        ({"image_processor_type": "DetrImageProcessor", "size": "big"}, "size must be a dict"),
        ({"image_processor_type": "DetrImageProcessor", "size": {"edge": 3}}, "not a detection"),
        ({"image_processor_type": "DetrImageProcessor", "do_pad": 1}, "do_pad must be"),
    ):
        with pytest.raises(MobiusError, match=message):
            pre, _ = processing.detection_processing(raw)
            pre(np.zeros((3, 8, 8), np.uint8))


def test_f16_package_detects(built, images, capsys, tmp_path):
    """A float16 build takes float16 pixels: the runner feeds them and reads its outputs back
    as float32 (the scores only near the float32 ones: f16 rounding)."""
    hf_dir, package = built("detr")
    f16 = build_with_cli(hf_dir, tmp_path / "f16", "--dtype", "f16")
    mine = ObjectDetector(package).detect(images[0], threshold=0.0)
    half = ObjectDetector(f16).detect(images[0], threshold=0.0)
    assert len(half) == len(mine) > 0
    np.testing.assert_allclose(
        sorted(d.score for d in half), sorted(d.score for d in mine), atol=2e-2, rtol=0
    )
    code, lines, err = detect_cli(capsys, f16, images[0])
    assert code == 0 and lines, err
