"""Tiny random ControlNet and T2I-Adapter pipelines (SD, and SDXL): built whole with ``mobius
build`` (the UNet with residual inputs), run by mobius's numpy runners and by diffusers from
the same latents, 2 Euler steps with classifier-free guidance; the images agree to 1e-3."""

from __future__ import annotations

import numpy as np
import pytest
from controlnet_pipeline_cases import make_adapter_pipeline, make_controlnet_pipeline
from pipeline_cases import PROMPT

from mobius.testing import build_with_cli

SIZE = 32  # latents 16 x 16


def condition_image(seed: int, size: int = SIZE):
    """A random RGB image (a stand-in for an edge map)."""
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


@pytest.fixture(scope="module")
def controlnet(tmp_path_factory):
    """(diffusers pipeline, built package directory)."""
    root = tmp_path_factory.mktemp("controlnet")
    pipe = make_controlnet_pipeline(root / "hf")
    return pipe, build_with_cli(root / "hf", root / "onnx")


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapter")
    pipe = make_adapter_pipeline(root / "hf")
    return pipe, build_with_cli(root / "hf", root / "onnx")


def run_both(case, image, **options):
    """(mobius's image, diffusers' image) of 2 steps from the same latents."""
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = case
    options.setdefault("guidance_scale", 7.5)  # the SD pipelines' default; SDXL's is 5
    latents = np.random.default_rng(1).standard_normal((1, 4, 16, 16)).astype(np.float32)
    options = dict(num_inference_steps=2, **options)
    got = open_pipeline(out)(PROMPT, image=image, latents=latents, **options)
    with torch.no_grad():
        expected = pipe(
            PROMPT, image=image, latents=torch.from_numpy(latents), output_type="np", **options
        ).images
    return got, expected


def test_controlnet_image_matches_diffusers(controlnet):
    got, expected = run_both(controlnet, condition_image(0))
    diff = float(np.abs(got - expected).max())
    print("controlnet: max abs diff", diff)  # measured 3.0e-6
    assert got.shape == expected.shape == (1, SIZE, SIZE, 3)
    assert diff <= 1e-3
    assert float(expected.std()) > 1e-3, "the image barely depends on anything"


def test_adapter_image_matches_diffusers(adapter):
    got, expected = run_both(adapter, condition_image(0), adapter_conditioning_scale=0.8)
    diff = float(np.abs(got - expected).max())
    print("adapter: max abs diff", diff)  # measured 3.6e-6
    assert got.shape == expected.shape == (1, SIZE, SIZE, 3)
    assert diff <= 1e-3


@pytest.mark.parametrize("case", ["controlnet", "adapter"])
def test_condition_image_changes_the_image(case, request):
    from mobius_diffusion.pipeline import open_pipeline

    runner = open_pipeline(request.getfixturevalue(case)[1])
    a, b = (runner(PROMPT, image=condition_image(s), num_inference_steps=2, seed=0) for s in (0, 1))
    assert float(np.abs(a - b).max()) > 1e-3


@pytest.mark.parametrize("case", ["controlnet", "adapter"])
def test_generate_cli_writes_the_image(case, request, tmp_path, monkeypatch):
    from PIL import Image

    from mobius.cli import main

    monkeypatch.chdir(tmp_path)
    condition_image(0, size=40).save("edges.png")  # the image's size: 40 x 40
    out = str(request.getfixturevalue(case)[1])
    code = main(["generate", out, PROMPT, "--steps", "2", "--seed", "0",
                 "--control-image", "edges.png", "--control-scale", "0.5", "--output", "x.png"])  # fmt: skip
    assert code == 0
    assert Image.open(tmp_path / "x.png").size == (40, 40)


def test_refusals_are_one_line(controlnet, tmp_path, capsys):
    from mobius.cli import main
    from mobius.errors import MobiusError
    from mobius_diffusion.pipeline import open_pipeline

    out = str(controlnet[1])
    with pytest.raises(MobiusError, match="no such file") as error:
        open_pipeline(out)(PROMPT, image=str(tmp_path / "missing.png"), num_inference_steps=1)
    assert "\n" not in str(error.value)
    (tmp_path / "bad.png").write_text("not an image")
    with pytest.raises(MobiusError, match="not a readable image"):
        open_pipeline(out)(PROMPT, image=str(tmp_path / "bad.png"), num_inference_steps=1)
    for args, message in (
        ([], "give --control-image FILE"),
        (["--control-image", str(tmp_path / "bad.png"), "--image", "x.png"], "takes no --image"),
    ):
        assert main(["generate", out, PROMPT, "--steps", "1", *args]) != 0
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err, err


@pytest.mark.parametrize("kind", ["controlnet", "adapter"])
def test_sdxl_image_matches_diffusers(kind, tmp_path):
    """SDXL: the ControlNet also takes the pooled text and size ids; the XL adapter's last
    feature (not the mid block's size) is left out, as diffusers leaves it out."""
    make = make_controlnet_pipeline if kind == "controlnet" else make_adapter_pipeline
    pipe = make(tmp_path / "hf", xl=True)
    case = pipe, build_with_cli(tmp_path / "hf", tmp_path / "onnx")
    # a scale, and control in the first of the 2 steps only (the second's scale is 0)
    controlnet = dict(controlnet_conditioning_scale=0.7, control_guidance_end=0.5)
    options = controlnet if kind == "controlnet" else dict(adapter_conditioning_factor=0.5)
    got, expected = run_both(case, condition_image(0), **options)
    diff = float(np.abs(got - expected).max())
    print(kind, "SDXL: max abs diff", diff)  # measured 2.6e-6 (controlnet), 2.0e-6 (adapter)
    assert diff <= 1e-3


def test_unet_residuals_follow_the_pipeline():
    """The whole-pipeline build gives the unet its controlnet's / adapter's inputs, and the
    option to no other component."""
    from mobius.errors import ConfigError
    from mobius_diffusion.unet_residuals import residuals_plugin

    built = {"unet", "controlnet", "vae", "text_encoder"}
    assert residuals_plugin({}, "unet", built) == {"unet_residuals": "controlnet"}
    assert residuals_plugin({}, "unet", {"unet", "adapter"}) == {"unet_residuals": "adapter"}
    assert residuals_plugin({"unet_residuals": "controlnet"}, "vae", built) == {}
    assert residuals_plugin({}, "unet", {"unet", "vae"}) == {}
    with pytest.raises(ConfigError, match="takes its controlnet's residuals"):
        residuals_plugin({"unet_residuals": "adapter"}, "unet", built)
    with pytest.raises(ConfigError, match="both a controlnet and an adapter"):
        residuals_plugin({}, "unet", built | {"adapter"})


def test_control_options_are_refused_for_other_packages():
    from types import SimpleNamespace

    from mobius.errors import ConfigError
    from mobius_diffusion.runner import _control_inputs

    plain = SimpleNamespace(index={"_class_name": "StableDiffusionPipeline"}, package_dir="sd/")
    with pytest.raises(ConfigError, match="for ControlNet and T2I-Adapter packages; sd/ is a"):
        _control_inputs(plain, {"control_image": "edges.png"}, {})
    _control_inputs(plain, {}, {})  # nothing asked, nothing given
