"""``mobius depth`` on Depth Pro packages matches transformers' ``depth-estimation`` pipeline.

The two tiny Depth Pro parity cases (without and with the field-of-view head; every
parameter perturbed) are saved with a ``DepthProImageProcessor`` at the graph's 64 x 64
and built once with the CLI. On three images (RGB, EXIF-rotated, transparent)
``mobius depth`` (through ``mobius.cli.main``) must save (``--raw``) the depth the pipeline
returns (inverse depth turned into depth, metric with the focal length the field of view
gives) within 1e-4 of its scale, and print the field of view and focal length that
transformers' post-processing returns. The pixels equal the processor's (bilinear and
bicubic); ``--validate`` compares ``field_of_view`` too; bad inputs get one line.
"""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
import transformers
from depth_parity_cases.depth_pro import CASES, DEPTH_PRO
from test_classify import images  # noqa: F401 (a module fixture: five varied images)
from transformers import AutoConfig

from mobius.cli import main
from mobius.errors import ConfigError, MobiusError
from mobius.testing import PARITY_ATOL, assert_validation_fails, broken_copy, build_with_cli
from mobius.validate import validate_package
from mobius_vision.depth_runner import DepthProProcessor, depth_processor
from mobius_vision.models.depth_pro import DepthProConfig
from mobius_vision.testing import make_random_depth_model

PLAIN, FOV = "depth_pro", "depth_pro-fov-batch-norm"
#: A number as the depth line prints it (``... field of view 53.1 degrees ...``).
NUMBER = r"([-+0-9.eE]+)"


def processor(**settings):
    """transformers' Depth Pro image processor, at the tiny graph's size unless told."""
    return transformers.DepthProImageProcessor(**{"size": {"height": 64, "width": 64}, **settings})


def plausible_depth_model(case: str):
    """A parity case's perturbed model whose outputs look like a trained one's: an inverse depth
    of about 1 to 20 (its last conv scaled down, its bias 1) and a field of view near 60
    degrees, so that the runner's conversion to depth is exercised rather than its clamping."""
    import torch

    model_type, config, _ = CASES[case]
    model = make_random_depth_model(AutoConfig.for_model(model_type, **config))
    with torch.no_grad():
        last = model.head.layers[4]
        last.weight.mul_(1e-2)
        last.bias.fill_(1.0)
        if model.fov_model is not None:
            model.fov_model.head.layers[-1].bias.add_(60.0)
    return model


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``built(case)``: ``(hf_dir, package_dir, reference)`` of a parity case with its processor,
    built once; ``reference(path)`` is transformers' post-processed result for one image."""
    root, done = tmp_path_factory.mktemp("depth-pro"), {}

    def build(case: str):
        if case not in done:
            model = plausible_depth_model(case)
            model.save_pretrained(root / case)
            processor().save_pretrained(root / case)
            package = build_with_cli(root / case, root / f"{case}-onnx")
            done[case] = root / case, package, post_processed(processor(), model)
        return done[case]

    return build


@pytest.mark.parametrize(
    "settings",
    [{}, dict(resample=3, size={"height": 40, "width": 56}, image_mean=[0.4, 0.5, 0.6])],
    ids=["bilinear", "bicubic-non-square"],
)
def test_pixels_match_the_image_processor(settings, images):  # noqa: F811
    reference = transformers.DepthProImageProcessor(
        **{"size": {"height": 64, "width": 64}, **settings}
    )
    ours = depth_processor(json.loads(reference.to_json_string()))
    assert isinstance(ours, DepthProProcessor)
    for path in images:
        expected = reference(transformers.image_utils.load_image(path))["pixel_values"][0]
        got = ours(path)
        assert got.shape == tuple(expected.shape), path
        np.testing.assert_allclose(got, expected.numpy(), atol=1e-5, rtol=0, err_msg=path)


def post_processed(image_processor, model):
    """``reference(path)``: transformers' processor, model and ``post_process_depth_estimation``
    on one image (what the depth-estimation pipeline runs)."""
    import torch

    def reference(path):
        image = transformers.image_utils.load_image(path)
        with torch.no_grad():
            outputs = model(**image_processor(images=image, return_tensors="pt"))
        size = [(image.height, image.width)]
        return image_processor.post_process_depth_estimation(outputs, size)[0]

    return reference


@pytest.mark.parametrize("case", [PLAIN, FOV])
def test_depth_matches_transformers(case, built, images, tmp_path, capsys):  # noqa: F811
    """Each image against transformers' processor, model and post-processing (what the pipeline
    runs); the first also against the depth-estimation pipeline itself, with the FOV head (without
    it, transformers 5.24's pipeline fails: its post-processing reads ``field_of_view``, which
    the pipeline's output then lacks)."""
    hf_dir, package, reference = built(case)
    capsys.readouterr()  # the build's own lines
    spreads = []
    for index, path in enumerate([images[0], *images[3:]]):  # RGB, EXIF-rotated, RGBA
        png, raw = tmp_path / f"{index}.png", tmp_path / f"{index}.npy"
        assert main(["depth", str(package), path, "--output", str(png), "--raw", str(raw)]) == 0
        line = capsys.readouterr().out.strip()
        assert line.startswith(f"{path}: depth min ") and line.endswith(f"{png}, {raw}"), line

        expected = reference(path)
        got, expected_depth = np.load(raw), expected["predicted_depth"].numpy()
        if case == FOV and index == 0:
            pipeline = transformers.pipeline("depth-estimation", model=str(hf_dir))
            np.testing.assert_array_equal(pipeline(path)["predicted_depth"], expected_depth)
        assert got.shape == expected_depth.shape, path
        scale = max(1.0, float(np.abs(expected_depth).max()))
        assert np.abs(got - expected_depth).max() <= PARITY_ATOL * scale, path
        spreads.append(float(expected_depth.max() - expected_depth.min()) / scale)

        fov = re.search(f"field of view {NUMBER} degrees \\(focal length {NUMBER} px\\)", line)
        assert (fov is not None) == (case == FOV), line
        if fov is not None:
            got_fov, got_focal = (float(value) for value in fov.groups())
            np.testing.assert_allclose(got_fov, float(expected["field_of_view"]), rtol=1e-5)
            np.testing.assert_allclose(got_focal, float(expected["focal_length"]), rtol=1e-5)
    assert min(spreads) > 1e-3, "the tiny model's depth barely depends on the image"


def test_validate_compares_the_field_of_view(built, tmp_path):
    hf_dir, package, _ = built(FOV)
    report = validate_package(package, hf_dir)
    assert report.passed, report.summary()
    assert set(report.diffs) == {"predicted_depth", "field_of_view"}, report.diffs
    assert max(report.diffs.values()) <= PARITY_ATOL, report.diffs
    assert_validation_fails(
        broken_copy(package, tmp_path / "broken", "model.onnx", "fov_model.head"), hf_dir
    )


def test_bad_inputs_get_one_line(built, images, tmp_path, capsys):  # noqa: F811
    _, package, _ = built(PLAIN)
    resized = tmp_path / "resized"
    shutil.copytree(package, resized)
    processor(size={"height": 32, "width": 32}).save_pretrained(resized)
    capsys.readouterr()
    assert main(["depth", str(resized), images[0]]) == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "its graph takes [3, 64, 64]" in error, error

    with pytest.raises(MobiusError, match="resample 0 is not bilinear"):
        DepthProProcessor.from_dict(json.loads(processor(resample=0).to_json_string()))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(image_model_config=dict(model_type="vit", image_size=16)), "not vit"),
        (dict(scaled_images_ratios=[0.3, 0.5, 1]), "is no image size"),
        (dict(intermediate_hook_ids=[5, 0]), "are not layer indices"),
        (dict(merge_padding_value=-1), "merge_padding_value -1"),
    ],
)
def test_unbuildable_configs_are_refused_in_one_line(overrides, message):
    config = AutoConfig.for_model("depth_pro", **{**DEPTH_PRO, **overrides})
    with pytest.raises(ConfigError, match=message) as error:
        DepthProConfig.from_hf(config)
    assert "\n" not in str(error.value)
