"""``mobius detect PKG IMAGE --labels ...`` on Grounding DINO against transformers'
``GroundingDinoProcessor``.

A tiny perturbed Grounding DINO (Swin backbone) is saved with its processor (a WordPiece
BERT tokenizer whose delimiters sit at BERT's ids, and DETR-style image settings that
resize a 45 x 37 image by its edges) and built once with the CLI. The runner's prompt
must tokenise as the processor's, its pixels and mask equal the image processor's, and
its printed boxes equal ``post_process_grounded_object_detection``'s: the same phrases,
scores within 1e-5, corners within 1e-3 px.
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from transformers import AutoConfig
from zero_shot_detection_parity_cases.grounding_dino import TINY_GROUNDING_DINO, TINY_SWIN

from mobius.cli import main
from mobius_vision.grounded_detection_runner import GroundedDetector, prompt_of
from mobius_vision.processing._image import to_chw
from mobius_vision.testing._grounded_detection_parity import make_random_grounded_detector

#: The words of the tiny vocabulary (a label is some of them).
WORDS = ("a", "cat", "remote", "dog", "red", "car", "on", "the", "table")
LABELS = ["a cat", "the remote", "red car"]
#: Well inside (0, 1) for the perturbed model's scores (checked below).
THRESHOLD, TEXT_THRESHOLD = 0.3, 0.5


def bert_vocabulary() -> dict[str, int]:
    """1100 entries: [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103, "." 1012,
    "?" 1029 (BERT's ids, which Grounding DINO hard-codes), the words from 200 on."""
    vocab = [f"[unused{i}]" for i in range(1100)]
    special = {0: "[PAD]", 100: "[UNK]", 101: "[CLS]", 102: "[SEP]", 103: "[MASK]"}
    special.update({1012: ".", 1029: "?"})
    for index, token in special.items():
        vocab[index] = token
    for offset, word in enumerate(WORDS):
        vocab[200 + offset] = word
    return {token: index for index, token in enumerate(vocab)}


class BuiltGroundingDino:
    """The tiny perturbed model, its processor, and the package built from them."""

    def __init__(self, folder) -> None:
        from transformers import (
            BertTokenizer,
            GroundingDinoImageProcessorPil,
            GroundingDinoProcessor,
        )

        config = dict(TINY_GROUNDING_DINO, backbone_config=TINY_SWIN)
        self.model = make_random_grounded_detector(AutoConfig.for_model("grounding-dino", **config))
        tokenizer = BertTokenizer(vocab=bert_vocabulary())
        image_processor = GroundingDinoImageProcessorPil(
            size={"shortest_edge": 64, "longest_edge": 96}
        )
        self.processor = GroundingDinoProcessor(image_processor, tokenizer)
        source = folder / "hf"
        self.model.save_pretrained(source)
        self.processor.save_pretrained(source)
        from mobius.testing import build_with_cli

        self.package = build_with_cli(source, folder / "onnx")

    def reference(self, image: Image.Image, labels, threshold, text_threshold):
        """``(phrase, score, box)`` per kept query of the processor's post-processing."""
        import torch

        inputs = self.processor(images=image, text=labels, return_tensors="pt")
        with torch.no_grad():
            out = self.model(**inputs)
        (result,) = self.processor.post_process_grounded_object_detection(
            out,
            inputs["input_ids"],
            threshold=threshold,
            text_threshold=text_threshold,
            target_sizes=[(image.height, image.width)],
        )
        found = [
            (label, float(score), [float(v) for v in box])
            for label, score, box in zip(
                result["text_labels"], result["scores"], result["boxes"], strict=True
            )
        ]
        return inputs, sorted(found, key=lambda f: f[1], reverse=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return BuiltGroundingDino(tmp_path_factory.mktemp("grounding-dino"))


@pytest.fixture(scope="module")
def image_file(tmp_path_factory):
    """A random 45 x 37 RGB PNG, resized to 77 x 64 by the edges rule (a 1 x 1 last level
    would make PyTorch's GroupNorm refuse a batch of one)."""
    path = tmp_path_factory.mktemp("images") / "random.png"
    pixels = np.random.default_rng(3).integers(0, 256, (37, 45, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


def test_prompt_and_pixels_equal_the_processor(built, image_file):
    image = Image.open(image_file).convert("RGB")
    inputs = built.processor(images=image, text=LABELS, return_tensors="np")
    detector = GroundedDetector(built.package)
    input_ids, _ = detector.encode(LABELS)
    assert prompt_of(LABELS) == "a cat. the remote. red car."
    np.testing.assert_array_equal(input_ids, inputs["input_ids"])
    pixels, mask = detector.processor(to_chw(image))
    assert pixels.shape == inputs["pixel_values"][0].shape
    np.testing.assert_allclose(pixels, inputs["pixel_values"][0], atol=1e-6, rtol=0)
    np.testing.assert_array_equal(mask, inputs["pixel_mask"][0])


def test_cli_prints_the_post_processed_boxes(built, image_file, capsys):
    image = Image.open(image_file).convert("RGB")
    _, expected = built.reference(image, LABELS, THRESHOLD, TEXT_THRESHOLD)
    scores = [score for _, score, _ in expected]
    assert expected and min(scores) < 0.999, f"the tiny model's scores are degenerate: {scores}"
    assert any(label for label, _, _ in expected), "no box has a phrase: the test reads none"
    argv = ["detect", str(built.package), str(image_file), "--labels", ",".join(LABELS)]
    argv += ["--threshold", str(THRESHOLD), "--text-threshold", str(TEXT_THRESHOLD)]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(expected)
    found = GroundedDetector(built.package).detect(image_file, LABELS, THRESHOLD, TEXT_THRESHOLD)
    for line, detection, (label, score, box) in zip(lines, found, expected, strict=True):
        assert line == f"{image_file}: {detection.line()}"
        assert detection.label == label
        assert abs(detection.score - score) <= 1e-5
        np.testing.assert_allclose(detection.box, box, atol=1e-3, rtol=0)


def test_refusals(built, image_file, capsys, tmp_path):
    """Each is one line on stderr, exit code 1, and names the problem."""
    package = str(built.package)
    long_labels = ",".join(["a cat on the red table"] * 4)  # 27 tokens, max_text_len 16
    refusals = {
        "give the texts to look for with --labels": (package, image_file),
        "holds a '.'": (package, image_file, "--labels", "a cat. a dog"),
        "the model reads at most 16": (package, image_file, "--labels", long_labels),
        "--text-threshold must be a number in [0, 1]": (
            package,
            image_file,
            "--labels",
            "a cat",
            "--text-threshold",
            "1.5",
        ),
    }
    for message, args in refusals.items():
        capsys.readouterr()
        code = main(["detect", *map(str, args)])
        out, err = capsys.readouterr()
        assert code == 1 and not out, (message, out, err)
        assert len(err.strip().splitlines()) == 1 and message in err, err
