"""``mobius depth`` runs ZoeDepth and DPT-Hybrid as transformers' ``depth-estimation``
pipeline does.

A tiny ZoeDepth (BEiT backbone, every parameter perturbed; one metric head, and the two-domain
"NK" form) is saved with its image processor (transformers' PIL backend: reflect padding,
aspect-kept resize to a multiple of 4 with bilinear ``align_corners=True``), a tiny
DPT-Hybrid (BiT stem) with DPT's (a warp to its fixed 64 x 64), and each is built once
with the CLI. On varied images (one EXIF-rotated, one transparent) ``mobius depth`` (through
``mobius.cli.main``) must save the depth map the pipeline returns, its padding cropped
off, within 1e-4 of its scale. ``--validate``'s check passes the build and fails a changed
weight; float16 builds load in ONNX Runtime; configs and processor settings mobius does not
build are refused in one line.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import transformers
from depth_parity_cases.dpt_hybrid import DPT_HYBRID
from depth_parity_cases.zoedepth import BEIT_BACKBONE, ZOEDEPTH, ZOEDEPTH_NK
from test_classify import images  # noqa: F401 (a module fixture: five varied images)
from test_depth_cli import case_builder
from transformers import AutoConfig

from mobius.cli import main
from mobius.errors import ConfigError, MobiusError
from mobius.testing import PARITY_ATOL, assert_validation_fails, broken_copy
from mobius.validate import validate_package
from mobius_vision.depth_runner import ZoeDepthProcessor, depth_processor
from mobius_vision.models.zoedepth import ZoeDepthConfig

#: ZoeDepth's processor at a tiny size (its real one: 384 x 512, multiples of 32).
PROCESSOR = dict(size={"height": 32, "width": 40}, ensure_multiple_of=4)

#: case -> (model_type, config, its image processor).
CASES = {
    "zoedepth": ("zoedepth", ZOEDEPTH, lambda: transformers.ZoeDepthImageProcessorPil(**PROCESSOR)),
    "zoedepth-nk": (
        "zoedepth",
        ZOEDEPTH_NK,
        lambda: transformers.ZoeDepthImageProcessorPil(**PROCESSOR),
    ),
    "dpt-hybrid": (
        "dpt",
        DPT_HYBRID,
        lambda: transformers.DPTImageProcessorPil(size={"height": 64, "width": 64}),
    ),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``built(case)``: ``(hf_dir, package_dir)`` of a case with its image processor, built once."""
    return case_builder(tmp_path_factory.mktemp("zoedepth"), CASES)


@pytest.mark.parametrize("do_pad", [True, False])
def test_pixels_match_the_image_processor(do_pad, images):  # noqa: F811
    reference = transformers.ZoeDepthImageProcessorPil(**PROCESSOR, do_pad=do_pad)
    ours = depth_processor(json.loads(reference.to_json_string()))
    assert isinstance(ours, ZoeDepthProcessor)
    for path in images:
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
    # the EXIF-rotated and transparent images for one case, the EXIF-rotated one for the
    # others, to stay quick (the pixels test reads all five)
    paths = images[3:] if case == "zoedepth" else images[3:4]
    for index, path in enumerate(paths):
        png, raw = tmp_path / f"{index}.png", tmp_path / f"{index}.npy"
        assert main(["depth", str(package), path, "--output", str(png), "--raw", str(raw)]) == 0
        assert capsys.readouterr().out.startswith(f"{path}: depth min ")
        expected = pipeline(path)["predicted_depth"].numpy()
        got = np.load(raw)
        assert got.shape == expected.shape, path
        scale = max(1.0, float(np.abs(expected).max()))
        assert np.abs(got - expected).max() <= PARITY_ATOL * scale, path
        spreads.append(float(expected.max() - expected.min()))
    assert min(spreads) > 1e-3, "the tiny model's depth barely depends on the image"


def test_validate_compares_with_transformers(built, tmp_path):
    """``--validate``'s check compares both outputs of the NK build (depth, domain logits)
    and fails a package with a changed weight."""
    hf_dir, package = built("zoedepth-nk")
    report = validate_package(package, hf_dir)
    assert report.passed, report.summary()
    assert set(report.diffs) == {"predicted_depth", "domain_logits"}, report.diffs
    assert_validation_fails(
        broken_copy(package, tmp_path / "broken", "model.onnx", "metric_head.conv2"), hf_dir
    )


@pytest.mark.parametrize(
    "model_type, config",
    [
        ("zoedepth", dict(ZOEDEPTH, bin_centers_type="normed")),
        ("zoedepth", ZOEDEPTH_NK),
        ("dpt", DPT_HYBRID),
    ],
)
def test_f16_build_loads_in_onnx_runtime(model_type, config, tmp_path):
    """The heads' constants take the activations' type (a float32 one fails to load in f16)."""
    from test_f16_builds_load import _assert_f16_build_loads

    _assert_f16_build_loads(AutoConfig.for_model(model_type, **config), tmp_path)


#: config overrides mobius refuses, and the words of the one-line refusal.
REFUSED = [
    (dict(bin_configurations=[*ZOEDEPTH_NK["bin_configurations"], {"n_bins": 4}]), "1 or 2"),
    (dict(ZOEDEPTH_NK, patch_transformer_hidden_size=64), "must be 128"),
    (
        dict(
            ZOEDEPTH_NK,
            bin_configurations=[{**b, "name": "a.b"} for b in ZOEDEPTH_NK["bin_configurations"]],
        ),
        "not a plain word",
    ),
    (dict(bin_configurations=[{"n_bins": 8, "min_depth": 5.0, "max_depth": 1.0}]), "min < max"),
    (dict(bin_centers_type="hybrid2"), "bin_centers_type"),
    (dict(neck_hidden_sizes=[8, 16, 32], reassemble_factors=[4, 2, 1]), "must be 4 each"),
    (
        dict(
            backbone_config=dict(
                BEIT_BACKBONE,
                use_relative_position_bias=False,
                use_shared_relative_position_bias=True,
            )
        ),
        "shared relative position bias",
    ),
    (dict(backbone_config=dict(BEIT_BACKBONE, reshape_hidden_states=True)), "token sequences"),
]


@pytest.mark.parametrize("overrides, message", REFUSED)
def test_unbuildable_configs_are_refused_in_one_line(overrides, message):
    hf_config = AutoConfig.for_model("zoedepth", **dict(ZOEDEPTH, **overrides))
    with pytest.raises(ConfigError, match=message) as error:
        ZoeDepthConfig.from_hf(hf_config)
    assert "\n" not in str(error.value)


def test_processor_settings_are_checked():
    raw = dict(PROCESSOR, image_processor_type="ZoeDepthImageProcessor")
    with pytest.raises(MobiusError, match="resample 3 is not built"):
        depth_processor(dict(raw, resample=3))
    with pytest.raises(MobiusError, match="ensure_multiple_of"):
        depth_processor(dict(raw, ensure_multiple_of="32"))
    with pytest.raises(MobiusError, match="do_pad"):
        depth_processor(dict(raw, do_pad="yes"))
