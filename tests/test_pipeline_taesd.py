"""A tiny random Stable Diffusion pipeline with TAESD (``AutoencoderTiny``) swapped in as its
VAE: built whole with ``mobius build``, run by mobius's numpy runners and by diffusers from the
same initial latents, 2 steps; the images agree to 1e-3.

diffusers divides the final latents by the VAE's ``scaling_factor`` (1.0 for TAESD) and its
tiny decoder maps to [-1, 1] itself; image to image encodes with TAESD's encoder, whose
latents are no distribution: nothing is drawn for them. Every parameter is perturbed.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from pipeline_cases import PROMPT
from taesd_pipeline_cases import make_taesd_pipeline

from mobius.testing import build_with_cli

HEIGHT = WIDTH = 32  # latents 16 x 16 (TAESD's two stages halve once)
OPTIONS = dict(num_inference_steps=2, guidance_scale=4.0)
SEED = 7


@pytest.fixture(scope="module")
def taesd(tmp_path_factory):
    """(diffusers pipeline, built package directory)."""
    root = tmp_path_factory.mktemp("taesd")
    pipe = make_taesd_pipeline(root / "hf")
    return pipe, build_with_cli(root / "hf", root / "onnx")


def test_package_layout(taesd):
    import onnx

    _, out = taesd
    assert json.loads((out / "model_index.json").read_text())["vae"] == [
        "diffusers",
        "AutoencoderTiny",
    ]
    record = json.loads((out / "mobius.json").read_text())
    built = {m["graphs"][0]: m["model_type"] for m in record["models"]}
    assert built["vae/encoder/model"] == "AutoencoderTiny"
    encoder = onnx.load(out / "vae/encoder/model.onnx", load_external_data=False)
    assert [o.name for o in encoder.graph.output] == ["latent"]  # no distribution


def test_sd_with_taesd_matches_diffusers(taesd):
    """Measured ~4.8e-6."""
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = taesd
    latents = np.random.default_rng(1).standard_normal((1, 4, 16, 16)).astype(np.float32)
    options = dict(OPTIONS, height=HEIGHT, width=WIDTH)
    with torch.no_grad():
        expected = pipe(
            PROMPT, latents=torch.from_numpy(latents), output_type="np", **options
        ).images
    got = open_pipeline(out)(PROMPT, latents=latents, **options)
    assert got.shape == expected.shape == (1, HEIGHT, WIDTH, 3)
    assert float(expected.std()) > 1e-3, "the image barely depends on anything"
    diff = float(np.abs(got - expected).max())
    print("text to image max abs diff", diff)
    assert diff <= 1e-3


def test_img2img_with_taesd_matches_diffusers(taesd, monkeypatch):
    """The package's components run as image to image (TAESD's encoder, no posterior draw):
    diffusers' initial noise is mobius's first draw. Measured ~2.0e-6."""
    import diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion_img2img as img2img
    import torch
    from PIL import Image

    from mobius_diffusion.pipelines.sd_img2img import StableDiffusionImg2ImgRunner

    pipe, out = taesd
    pipe = img2img.StableDiffusionImg2ImgPipeline(**pipe.components, requires_safety_checker=False)
    pipe.scheduler = pipe.scheduler.from_config(pipe.scheduler.config)  # fresh: no begin index
    draws = np.random.default_rng(SEED)
    monkeypatch.setattr(
        img2img,
        "randn_tensor",
        lambda shape, **_: torch.from_numpy(draws.standard_normal(tuple(shape), dtype=np.float32)),
    )
    pixels = np.random.default_rng(0).integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)
    image = Image.fromarray(pixels)
    options = dict(OPTIONS, num_inference_steps=3, strength=0.7)  # the last 2 of 3 steps
    got = StableDiffusionImg2ImgRunner(out)(PROMPT, image, seed=SEED, **options)
    with torch.no_grad():
        expected = pipe(PROMPT, image, output_type="np", **options).images
    assert got.shape == expected.shape == (1, HEIGHT, WIDTH, 3)
    assert float(expected.std()) > 1e-3, "the image barely depends on anything"
    diff = float(np.abs(got - expected).max())
    print("image to image max abs diff", diff)
    assert diff <= 1e-3


def test_generate_cli_writes_the_image(taesd, tmp_path):
    from PIL import Image

    from mobius.cli import main
    from mobius_diffusion.pipeline import open_pipeline, to_pil

    _, out = taesd
    image = tmp_path / "image.png"
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3", "--output", str(image)]
    assert main([*args, "--height", str(HEIGHT), "--width", str(WIDTH)]) == 0
    options = dict(num_inference_steps=2, seed=3, height=HEIGHT, width=WIDTH)
    expected = to_pil(open_pipeline(out)(PROMPT, **options))[0]
    assert np.array_equal(np.asarray(Image.open(image)), np.asarray(expected))
