"""``mobius depth`` matches transformers' ``depth-estimation`` pipeline on tiny random models.

Depth Anything, DPT and GLPN (every parameter perturbed) are saved each with its image
processor (transformers' PIL backends: DPT's aspect-kept multiple-of-patch resize, its
square warp, GLPN's round-down to 32) and built once with the CLI. On varied images (one
EXIF-rotated, one transparent) ``mobius depth`` (through ``mobius.cli.main``) must save
(``--raw``) the depth map the pipeline returns at the image's size, within 1e-4 of its
scale, and write it as a 16-bit PNG stretched over [0, 65535]. Prompt Depth Anything's
``--prompt-depth`` run is checked against transformers' processor, model and
post-processing (the pipeline takes no prompt); ``--validate``'s check passes the builds
and fails a changed weight; bad inputs get one line.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import transformers
from depth_parity_cases.depth_anything import DEPTH_ANYTHING
from depth_parity_cases.dpt import DPT
from depth_parity_cases.glpn import GLPN
from PIL import Image
from test_classify import images  # noqa: F401 (a module fixture: five varied images)
from transformers import AutoConfig

from mobius.cli import main
from mobius.errors import MobiusError
from mobius.testing import (
    PARITY_ATOL,
    assert_smoke_passes,
    assert_validation_fails,
    broken_copy,
    build_with_cli,
)
from mobius.validate import validate_package
from mobius_vision.depth_runner import DptProcessor, depth_processor, multiple_of
from mobius_vision.testing import make_random_depth_model

#: Depth Anything's processor settings, at a tiny size (its real one: 518, multiples of 14).
PROCESSOR = dict(
    size={"height": 32, "width": 32},
    keep_aspect_ratio=True,
    ensure_multiple_of=4,
    resample=3,
    image_mean=[0.485, 0.456, 0.406],
    image_std=[0.229, 0.224, 0.225],
)

#: case -> (model_type, config, image processor): each family with its own processor. DPT's
#: ViT needs square pixels: its processor warps to 32 x 32. GLPN's rounds each side down to 32.
CASES = {
    "depth_anything": (
        "depth_anything",
        DEPTH_ANYTHING,
        lambda: transformers.DPTImageProcessorPil(**PROCESSOR),
    ),
    "dpt": (
        "dpt",
        DPT,
        lambda: transformers.DPTImageProcessorPil(size={"height": 32, "width": 32}),
    ),
    "glpn": ("glpn", GLPN, lambda: transformers.GLPNImageProcessorPil()),
}


def case_builder(root, cases: dict):
    """``build(case)``: ``(hf_dir, package_dir)`` of a case of ``cases`` (model_type, config,
    image processor factory) saved under ``root`` with its processor, built once."""
    done = {}

    def build(case: str):
        if case not in done:
            model_type, config, processor = cases[case]
            model = make_random_depth_model(AutoConfig.for_model(model_type, **config))
            model.save_pretrained(root / case)
            processor().save_pretrained(root / case)
            done[case] = root / case, build_with_cli(root / case, root / f"{case}-onnx")
        return done[case]

    return build


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``built(case)``: ``(hf_dir, package_dir)`` of a case with its image processor, built once."""
    return case_builder(tmp_path_factory.mktemp("depth"), CASES)


def usable(case: str, images: list[str]) -> list[str]:  # noqa: F811
    """The images a case's model takes (GLPN: both sides at least 32 pixels)."""
    if case != "glpn":
        return images
    return [path for path in images if min(Image.open(path).size) >= 32]


#: Image processors beside the cases' own: DPT's centre padding to a multiple of 14.
PROCESSORS_ONLY = {
    "dpt-padded": lambda: transformers.DPTImageProcessorPil(
        size={"height": 30, "width": 40}, keep_aspect_ratio=True, do_pad=True, size_divisor=14
    ),
}


@pytest.mark.parametrize("case", sorted([*CASES, *PROCESSORS_ONLY]))
def test_pixels_match_the_image_processor(case, images):  # noqa: F811
    reference = PROCESSORS_ONLY[case]() if case in PROCESSORS_ONLY else CASES[case][2]()
    ours = depth_processor(json.loads(reference.to_json_string()))
    for path in usable(case, images):
        expected = reference(transformers.image_utils.load_image(path))["pixel_values"][0]
        got = ours(path)
        assert got.shape == expected.shape, path
        np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0, err_msg=path)


@pytest.mark.parametrize("case", sorted(CASES))
def test_depth_matches_the_pipeline(case, built, images, tmp_path, capsys):  # noqa: F811
    hf_dir, package = built(case)
    pipeline = transformers.pipeline("depth-estimation", model=str(hf_dir))
    capsys.readouterr()  # the build's own lines
    spreads = []
    for index, path in enumerate(usable(case, images)):
        png, raw = tmp_path / f"{index}.png", tmp_path / f"{index}.npy"
        assert main(["depth", str(package), path, "--output", str(png), "--raw", str(raw)]) == 0
        line = capsys.readouterr().out.strip()
        assert line.startswith(f"{path}: depth min ") and str(png) in line

        expected = pipeline(path)["predicted_depth"].numpy()
        got = np.load(raw)
        assert got.shape == expected.shape == Image.open(png).size[::-1]
        scale = max(1.0, float(np.abs(expected).max()))
        assert np.abs(got - expected).max() <= PARITY_ATOL * scale, path

        exact = got.astype(np.float64)
        stretched = (exact - exact.min()) / (exact.max() - exact.min()) * 65535
        written = np.asarray(Image.open(png), dtype=np.float64)
        assert np.abs(written - stretched).max() <= 0.5 + 1e-6, path
        spreads.append(float(expected.max() - expected.min()))
    assert min(spreads) > 1e-3, "the tiny model's depth barely depends on the image"


def test_default_png_goes_to_the_current_directory(built, images, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.chdir(tmp_path)
    assert main(["depth", str(built("depth_anything")[1]), images[0], images[2]]) == 0
    assert sorted(p.name for p in tmp_path.glob("*-depth.png")) == [
        "grey-depth.png",
        "noise-depth.png",
    ]
    assert Image.open(tmp_path / "noise-depth.png").mode.startswith("I;16")


def test_bad_inputs_get_one_line(built, images, tmp_path, capsys):  # noqa: F811
    package = str(built("depth_anything")[1])
    capsys.readouterr()  # the build's own lines
    not_an_image = tmp_path / "notes.png"
    not_an_image.write_text("not a picture")
    cases = [
        ([package, str(tmp_path / "missing.png")], "no image file at"),
        ([package, str(not_an_image)], r"cannot read .*notes.png as an image"),
        (
            [package, *images[:2], "--output", "x.png"],
            "--output, --raw and --prompt-depth name one file",
        ),
        ([str(tmp_path), images[0]], "no runner of 'mobius depth' accepts"),
    ]
    for args, message in cases:
        assert main(["depth", *args]) == 1
        error = capsys.readouterr().err.strip()
        assert len(error.splitlines()) == 1 and re.search(message, error), error


def test_processor_settings_are_checked():
    with pytest.raises(MobiusError, match="ensure_multiple_of"):
        DptProcessor.from_dict(dict(PROCESSOR, ensure_multiple_of="14"))
    with pytest.raises(MobiusError, match="keep_aspect_ratio"):
        DptProcessor.from_dict(dict(PROCESSOR, keep_aspect_ratio=1))
    with pytest.raises(MobiusError, match="too small"):
        multiple_of(1.5, 4)
    with pytest.raises(
        MobiusError, match="no image processor like transformers' ViTImageProcessor"
    ):
        depth_processor({"image_processor_type": "ViTImageProcessor"})


@pytest.mark.parametrize("case", ["depth_anything", "glpn"])
def test_validate_compares_with_transformers(case, built, tmp_path, monkeypatch):
    """``--validate``'s check: the built package passes against its source, a package with a
    changed weight fails, and without torch a smoke run passes."""
    hf_dir, package = built(case)
    report = validate_package(package, hf_dir)
    assert report.passed and report.reference.startswith("transformers "), report.summary()
    assert max(report.diffs.values()) <= PARITY_ATOL, report.diffs
    assert_validation_fails(broken_copy(package, tmp_path / "broken", "model.onnx", "head"), hf_dir)
    assert_smoke_passes(package, hf_dir, monkeypatch, tmp_path / "smoke")


@pytest.fixture(scope="module")
def prompt_built(tmp_path_factory):
    """A tiny Prompt Depth Anything with its processor, built, and a 16-bit PNG prompt (mm)."""
    root = tmp_path_factory.mktemp("prompt-depth")
    config = AutoConfig.for_model("prompt_depth_anything", **DEPTH_ANYTHING)
    make_random_depth_model(config).save_pretrained(root / "hf")
    transformers.PromptDepthAnythingImageProcessorPil(**PROCESSOR).save_pretrained(root / "hf")
    millimetres = np.random.default_rng(1).integers(300, 6000, (6, 5), dtype=np.uint16)
    Image.fromarray(millimetres).save(root / "prompt.png")
    return root / "hf", build_with_cli(root / "hf", root / "onnx"), root / "prompt.png"


def test_prompt_depth_matches_transformers(prompt_built, images, tmp_path, capsys):  # noqa: F811
    """The prompt package's depth against transformers' processor, model and post-processing
    (the depth-estimation pipeline takes no prompt)."""
    import torch

    hf_dir, package, prompt = prompt_built
    processor = transformers.AutoImageProcessor.from_pretrained(hf_dir)
    model = transformers.AutoModelForDepthEstimation.from_pretrained(hf_dir).eval()
    for path in images[:2]:
        raw = tmp_path / "depth.npy"
        args = ["depth", str(package), path, "--prompt-depth", str(prompt), "--raw", str(raw)]
        assert main([*args, "--output", str(tmp_path / "depth.png")]) == 0
        image = transformers.image_utils.load_image(path)
        inputs = processor(images=image, prompt_depth=Image.open(prompt), return_tensors="pt")
        with torch.no_grad():
            outputs = model(**inputs)
        target = [(image.height, image.width)]
        expected = processor.post_process_depth_estimation(outputs, target)[0]["predicted_depth"]
        expected = expected.numpy()
        got = np.load(raw)
        assert got.shape == expected.shape
        assert np.abs(got - expected).max() <= PARITY_ATOL * max(1.0, np.abs(expected).max())
    capsys.readouterr()


def test_prompt_depth_is_required_where_taken_only(prompt_built, built, images, capsys):  # noqa: F811
    _, package, prompt = prompt_built
    plain = built("depth_anything")[1]
    capsys.readouterr()  # the build's own lines
    cases = [
        ([str(package), images[0]], "needs the image's low-resolution depth"),
        ([str(plain), images[0], "--prompt-depth", str(prompt)], "takes no prompt depth"),
        ([str(package), images[0], "--prompt-depth", images[0]], "not a single-channel depth"),
    ]
    for args, message in cases:
        assert main(["depth", *args]) == 1
        error = capsys.readouterr().err.strip()
        assert len(error.splitlines()) == 1 and message in error, error


def test_validate_feeds_a_prompt_where_taken(prompt_built):
    hf_dir, package, _ = prompt_built
    report = validate_package(package, hf_dir)
    assert report.passed and max(report.diffs.values()) <= PARITY_ATOL, report.summary()
