"""``mobius segment PKG IMAGE --labels ...`` on CLIPSeg against transformers.

A tiny perturbed ``CLIPSegForImageSegmentation`` is saved with its ``CLIPSegProcessor`` (a
word-level tokenizer that adds begin and end tokens and pads on the right, as CLIP's; a
48 px ``ViTImageProcessorPil``, so the tower also resizes its 32 px position table; the
settings in ``processor_config.json``, as transformers 5 saves them) and built once with the
CLI. transformers has no pipeline for CLIPSeg: the reference is its users' recipe, the
processor's inputs through the model, the sigmoid of the logits resized bilinearly to the
image. The runner's probabilities must be within 1e-5 of it, its PNGs and printed shares
equal to it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _vl_built import assert_one_line_refusals
from PIL import Image
from text_prompted_segmentation_parity_cases.clipseg import TINY_CLIPSEG
from transformers import AutoConfig

from mobius.cli import main
from mobius.errors import MobiusError
from mobius.testing import build_with_cli, tiny_tokenizer
from mobius_vision.testing._text_prompted_segmentation_parity import (
    IMAGENET_MEAN_STD,
    make_random_clipseg,
)
from mobius_vision.text_prompted_segmentation_runner import TextPromptedSegmenter, label_paths

#: Prompts of different lengths in the tiny tokenizer's words (ids below its special tokens).
LABELS = ["w11 w40", "w7", "w63 w5 w20"]
#: The probability of the binary masks' test.
THRESHOLD = 0.5


class BuiltCLIPSeg:
    """A tiny perturbed CLIPSeg, its processor, and its package built with the CLI."""

    def __init__(self, folder) -> None:
        import torch
        import transformers
        from tokenizers import processors

        self.model = make_random_clipseg(AutoConfig.for_model("clipseg", **TINY_CLIPSEG))
        # The perturbed upsampler's logits reach 14, where float32's noise alone (6e-5, as
        # measured) nears the 1e-5 bar on probabilities, and most pixels saturate: a tenth of
        # its weights keeps the masks graded and the comparison clear of rounding.
        with torch.no_grad():
            upsampler = self.model.decoder.transposed_convolution
            upsampler.weight.mul_(0.1)
            upsampler.bias.mul_(0.1)
        tokenizer = tiny_tokenizer(99, {"<bos>": 97, "<eos>": 98})
        tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
            single="<bos> $A <eos>", special_tokens=[("<bos>", 97), ("<eos>", 98)]
        )
        tokenizer.padding_side = "right"
        mean, std = IMAGENET_MEAN_STD
        image_processor = transformers.ViTImageProcessorPil(
            size={"height": 48, "width": 48}, image_mean=mean, image_std=std
        )
        self.processor = transformers.CLIPSegProcessor(image_processor, tokenizer)
        source = folder / "hf"
        self.model.save_pretrained(source)
        self.processor.save_pretrained(source)
        self.package = build_with_cli(source, folder / "onnx")

    def reference(self, image: Image.Image, labels) -> np.ndarray:
        """``[labels, height, width]``: the sigmoid of each label's logits, resized to the image."""
        import torch

        inputs = self.processor(
            text=labels, images=[image] * len(labels), padding=True, return_tensors="pt"
        )
        with torch.no_grad():
            probabilities = torch.sigmoid(self.model(**inputs).logits)[:, None]
            resized = torch.nn.functional.interpolate(
                probabilities,
                size=(image.height, image.width),
                mode="bilinear",
                align_corners=False,
            )
        return resized[:, 0].numpy()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return BuiltCLIPSeg(tmp_path_factory.mktemp("clipseg"))


@pytest.fixture(scope="module")
def image_file(tmp_path_factory):
    """A random 45 x 37 RGB PNG: neither square nor the processor's size."""
    path = tmp_path_factory.mktemp("images") / "random.png"
    pixels = np.random.default_rng(3).integers(0, 256, (37, 45, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


@pytest.fixture(scope="module")
def expected(built, image_file):
    reference = built.reference(Image.open(image_file).convert("RGB"), LABELS)
    spread = np.abs(np.diff(reference, axis=0)).max()
    assert spread > 1e-2 and 0.01 < reference.mean() < 0.99, "the tiny model is degenerate"
    return reference


def test_probabilities_equal_transformers(built, image_file, expected):
    got = TextPromptedSegmenter(built.package).probabilities(image_file, LABELS)
    assert got.shape == expected.shape == (len(LABELS), 37, 45)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


def test_cli_writes_a_probability_png_per_label(built, image_file, expected, tmp_path, capsys):
    output = tmp_path / "masks.png"
    argv = ["segment", str(built.package), str(image_file), "--labels", ",".join(LABELS)]
    assert main([*argv, "--output", str(output)]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    printed = dict(part.rsplit(" ", 1) for part in line.split(": ", 1)[1].split("; "))
    assert list(printed) == LABELS
    for label, png, reference in zip(LABELS, label_paths(output, LABELS), expected, strict=True):
        assert abs(float(printed[label]) - (reference > 0.5).mean()) <= 1e-6
        grey = np.asarray(Image.open(png)).astype(np.int64)
        assert grey.shape == reference.shape
        # rint(p * 255), equal but where p * 255 sits within the runner's 1e-5 of a half
        scaled = reference * 255
        clear = np.abs(scaled - np.floor(scaled) - 0.5) > 255e-5
        np.testing.assert_array_equal(grey[clear], np.rint(scaled)[clear])


def test_cli_threshold_writes_binary_masks(built, image_file, expected, tmp_path):
    argv = ["segment", str(built.package), str(image_file), "--labels", ",".join(LABELS)]
    output = tmp_path / "binary.png"
    assert main([*argv, "--threshold", str(THRESHOLD), "--output", str(output)]) == 0
    for png, reference in zip(label_paths(output, LABELS), expected, strict=True):
        mask = np.asarray(Image.open(png))
        clear = np.abs(reference - THRESHOLD) > 1e-5
        assert set(np.unique(mask)) <= {0, 255}
        np.testing.assert_array_equal((mask == 255)[clear], (reference > THRESHOLD)[clear])


def test_label_file_names():
    """A slug of each label's letters and digits beside the base, numbered when two clash."""
    base = Path("out") / "cat.segment.png"
    paths = label_paths(base, ["A cat!", "a cat", "../x"])
    names = ["cat.segment.a-cat.png", "cat.segment.a-cat-1.png", "cat.segment.x.png"]
    assert [p.name for p in paths] == names
    assert all(p.parent == base.parent for p in paths)


def test_refusals(built, image_file, capsys, tmp_path, monkeypatch):
    """Each is one line on stderr, exit code 1, and names the problem."""
    monkeypatch.chdir(tmp_path)  # where a mask would go without --output
    not_an_image = tmp_path / "notes.png"
    not_an_image.write_text("not an image")
    package = str(built.package)
    refusals = {
        "give the texts with --labels": (package, image_file),
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
    assert_one_line_refusals(capsys, "segment", refusals)


def test_wrong_packages_are_refused(built, image_file, tmp_path, capsys, monkeypatch):
    import shutil

    monkeypatch.chdir(tmp_path)  # where a mask would go without --output

    with pytest.raises(MobiusError, match="is not a text-prompted segmentation package"):
        TextPromptedSegmenter(tmp_path)
    copy = shutil.copytree(built.package, tmp_path / "copy")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (copy / name).unlink()
    assert main(["segment", str(copy), str(image_file), "--labels", "w7"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot load the tokenizer" in err[0], err
