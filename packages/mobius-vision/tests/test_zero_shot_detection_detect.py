"""``mobius detect PKG IMAGE --labels ...`` on zero-shot detectors (OWL-ViT, OWLv2) against
transformers.

Each family's tiny perturbed model is saved with a word-level tokenizer and its PIL image
processor, built once with the CLI; the runner's pixels must equal the image processor's,
its boxes the processor's ``post_process_object_detection`` (within 1e-3 px, scores within
1e-5) and its printed lines transformers' ``pipeline("zero-shot-object-detection")``.
"""

from __future__ import annotations

import numpy as np
import pytest
from _vl_built import assert_one_line_refusals
from PIL import Image
from transformers import AutoConfig
from zero_shot_detection_parity_cases.owlvit import TINY_OWL

from mobius.cli import main
from mobius.errors import MobiusError
from mobius.testing import build_with_cli, tiny_tokenizer
from mobius_vision.processing._image import to_chw
from mobius_vision.processing._settings import read_settings
from mobius_vision.processing.owl import owl_processor
from mobius_vision.testing._zero_shot_detection_parity import make_random_open_detector
from mobius_vision.zero_shot_detection_runner import ZeroShotDetector

#: The tiny tokenizer's words (its ids 2..96, below the end token 98 the text tower pools at).
LABELS = ["w11 w40", "w7", "w63 w5 w20"]
#: Well inside (0, 1): the perturbed heads' logits are large, most scores near 0 or 1.
THRESHOLD = 0.3
IMAGE_PROCESSORS = {"owlvit": "OwlViTImageProcessorPil", "owlv2": "Owlv2ImageProcessorPil"}


class BuiltOwl:
    """A tiny perturbed model of one family, its tokenizer and image processor, built."""

    def __init__(self, model_type: str, folder) -> None:
        import transformers

        self.model = make_random_open_detector(AutoConfig.for_model(model_type, **TINY_OWL))
        self.tokenizer = tiny_tokenizer(99, {"<bos>": 97, "<eos>": 98})
        processor_class = getattr(transformers, IMAGE_PROCESSORS[model_type])
        self.image_processor = processor_class(size={"height": 32, "width": 32})
        source = folder / "hf"
        self.model.save_pretrained(source)
        if model_type == "owlv2":  # the settings in processor_config.json, as transformers 5 saves
            transformers.Owlv2Processor(self.image_processor, self.tokenizer).save_pretrained(
                source
            )
        else:  # preprocessor_config.json, as the hub's checkpoints have them
            self.tokenizer.save_pretrained(source)
            self.image_processor.save_pretrained(source)
        self.package = build_with_cli(source, folder / "onnx")

    def reference_boxes(self, image: Image.Image, labels, threshold):
        """``(label, score, box)`` per box, each label alone as the pipeline runs it, with
        the processor's float boxes, best first."""
        import torch

        found = []
        pixels = self.image_processor(image, return_tensors="pt")["pixel_values"]
        for label in labels:
            ids = torch.tensor([self.tokenizer(label)["input_ids"]])
            with torch.no_grad():
                out = self.model(
                    input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=pixels
                )
            (result,) = self.image_processor.post_process_object_detection(
                out, threshold=threshold, target_sizes=[(image.height, image.width)]
            )
            found += [
                (label, float(s), [float(v) for v in box])
                for s, box in zip(result["scores"], result["boxes"], strict=True)
            ]
        return sorted(found, key=lambda f: f[1], reverse=True)


@pytest.fixture(scope="module", params=sorted(IMAGE_PROCESSORS))
def built(request, tmp_path_factory):
    return BuiltOwl(request.param, tmp_path_factory.mktemp(request.param))


@pytest.fixture(scope="module")
def image_file(tmp_path_factory):
    """A random 45 x 37 RGB PNG: not square, so OWLv2 pads it and the box scales differ."""
    path = tmp_path_factory.mktemp("images") / "random.png"
    pixels = np.random.default_rng(3).integers(0, 256, (37, 45, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


def test_pixels_equal_the_image_processor(built, image_file):
    image = Image.open(image_file).convert("RGB")
    expected = built.image_processor(image, return_tensors="np")["pixel_values"][0]
    got = owl_processor(read_settings(built.package).image)(to_chw(image))
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)


def test_boxes_equal_post_processing(built, image_file):
    image = Image.open(image_file).convert("RGB")
    expected = built.reference_boxes(image, LABELS, THRESHOLD)
    scores = [s for _, s, _ in expected]
    assert expected and min(scores) < 0.999, f"the tiny model's scores are degenerate: {scores}"
    found = ZeroShotDetector(built.package).detect(image_file, LABELS, THRESHOLD)
    assert [d.label for d in found] == [label for label, _, _ in expected]
    for detection, (_, score, box) in zip(found, expected, strict=True):
        assert abs(detection.score - score) <= 1e-5
        np.testing.assert_allclose(detection.box, box, atol=1e-3, rtol=0)


def test_cli_prints_the_pipeline_boxes(built, image_file, capsys):
    from transformers import pipeline

    detector = pipeline(
        "zero-shot-object-detection",
        model=built.model,
        tokenizer=built.tokenizer,
        image_processor=built.image_processor,
    )
    expected = detector(str(image_file), candidate_labels=LABELS, threshold=THRESHOLD)
    argv = ["detect", str(built.package), str(image_file), "--labels", ",".join(LABELS)]
    assert main([*argv, "--threshold", str(THRESHOLD)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(expected) > 0
    for line, reference in zip(lines, expected, strict=True):
        path, rest = line.split(": ", 1)
        *label, score, x0, y0, x1, y1 = rest.split()
        assert path == str(image_file) and " ".join(label) == reference["label"]
        assert abs(float(score) - reference["score"]) <= 1e-5
        box = reference["box"]
        for printed, corner in zip((x0, y0, x1, y1), ("xmin", "ymin", "xmax", "ymax"), strict=True):
            assert _truncates_to(float(printed), box[corner]), (line, box)


def _truncates_to(printed: float, truncated: int) -> bool:
    """Whether a corner printed to 2 decimals is one the pipeline truncates (toward zero) to
    ``truncated`` (either side of the printing's rounding)."""
    return any(int(printed + delta) == truncated for delta in (-0.005, 0.0, 0.005))


def test_refusals(built, image_file, capsys, tmp_path):
    """Each is one line on stderr, exit code 1, and names the problem."""
    not_an_image = tmp_path / "notes.png"
    not_an_image.write_text("not an image")
    package = str(built.package)
    refusals = {
        "give the texts to look for with --labels": (package, image_file),
        "--labels names no label": (package, image_file, "--labels", " , "),
        "cannot read": (package, not_an_image, "--labels", "w7"),
        "no image file at": (package, tmp_path / "missing.png", "--labels", "w7"),
        "--threshold must be a number in [0, 1]": (
            package,
            image_file,
            "--labels",
            "w7",
            "--threshold",
            "2",
        ),
    }
    assert_one_line_refusals(capsys, "detect", refusals)


def test_bad_processor_settings_are_refused():
    for raw, message in (
        ({"image_processor_type": "DetrImageProcessor"}, "zero-shot detection packages take"),
        ({"image_processor_type": "OwlViTImageProcessor", "size": "big"}, "size must be a dict"),
        ({"image_processor_type": "Owlv2ImageProcessor", "do_pad": 1}, "do_pad must be"),
        ({"image_processor_type": "Owlv2ImageProcessor", "size": {"shortest_edge": 8}}, "height"),
    ):
        with pytest.raises(MobiusError, match=message):
            owl_processor(raw)


def test_package_without_tokenizer_is_refused(built, image_file, tmp_path, capsys):
    import shutil

    copy = shutil.copytree(built.package, tmp_path / "copy")
    (copy / "tokenizer.json").unlink()
    assert main(["detect", str(copy), str(image_file), "--labels", "w7"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot load the tokenizer" in err[0], err
