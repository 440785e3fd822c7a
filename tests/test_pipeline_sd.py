"""A tiny random Stable Diffusion pipeline: built whole with ``mobius build``, run by mobius's
numpy runner and by diffusers from the same initial latents, 2 steps; the images agree to 1e-3.

Every parameter of the text encoder, UNet and VAE is perturbed. One build serves the
three ported schedulers of Stable Diffusion (Euler, DDIM, PNDM); the CLI's
``mobius generate`` writes the same image as the Python API.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from pipeline_cases import PROMPT, make_sd_pipeline

from mobius.testing import build_with_cli

SD_BETAS = dict(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", steps_offset=1)
SCHEDULERS = {
    "EulerDiscreteScheduler": SD_BETAS,
    "DDIMScheduler": dict(SD_BETAS, clip_sample=False, set_alpha_to_one=False),
    "PNDMScheduler": dict(SD_BETAS, skip_prk_steps=True, set_alpha_to_one=False),
}
HEIGHT = WIDTH = 32  # latents 16 x 16 (the VAE halves once)


@pytest.fixture(scope="module")
def sd(tmp_path_factory):
    """(diffusers pipeline, built package directory)."""
    root = tmp_path_factory.mktemp("sd")
    pipe = make_sd_pipeline(root / "hf")
    out = build_with_cli(root / "hf", root / "onnx")
    return pipe, out


def test_package_layout(sd):
    _, out = sd
    for graph in ("unet/model", "vae/encoder/model", "vae/decoder/model", "text_encoder/model"):
        assert (out / f"{graph}.onnx").is_file(), graph
    for name in ("unet", "vae", "text_encoder"):
        assert (out / name / "config.json").is_file()
    assert (out / "tokenizer" / "tokenizer.json").is_file()
    assert (out / "scheduler" / "scheduler_config.json").is_file()
    assert json.loads((out / "model_index.json").read_text())["_class_name"] == (
        "StableDiffusionPipeline"
    )


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_sd_image_matches_diffusers(sd, scheduler):
    import diffusers
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = sd
    config = {"_class_name": scheduler, **SCHEDULERS[scheduler]}
    pipe.scheduler = getattr(diffusers, scheduler).from_config(config)
    latents = np.random.default_rng(1).standard_normal((1, 4, 16, 16)).astype(np.float32)
    options = dict(num_inference_steps=2, guidance_scale=4.0, height=HEIGHT, width=WIDTH)
    with torch.no_grad():
        expected = pipe(
            PROMPT, latents=torch.from_numpy(latents), output_type="np", **options
        ).images

    runner = open_pipeline(out)
    runner.scheduler_config = config
    got = runner(PROMPT, latents=latents, **options)
    assert got.shape == expected.shape == (1, HEIGHT, WIDTH, 3)
    diff = float(np.abs(got - expected).max())
    print(scheduler, "max abs diff", diff)
    assert diff <= 1e-3
    assert float(expected.std()) > 1e-3, "the image barely depends on anything"


def test_prompt_changes_the_image(sd):
    from mobius_diffusion.pipeline import open_pipeline

    runner = open_pipeline(sd[1])
    options = dict(num_inference_steps=2, height=HEIGHT, width=WIDTH, seed=0)
    a, b = runner(PROMPT, **options), runner("a blue bicycle", **options)
    assert float(np.abs(a - b).max()) > 1e-3


def test_noise_adding_samplers_are_seeded(sd):
    """Euler ancestral adds noise each step: the same seed repeats the image, another
    seed with the same initial latents does not (the step noise follows the seed)."""
    from mobius_diffusion.pipeline import open_pipeline

    runner = open_pipeline(sd[1])
    runner.scheduler_config = {"_class_name": "EulerAncestralDiscreteScheduler", **SD_BETAS}
    latents = np.random.default_rng(1).standard_normal((1, 4, 16, 16)).astype(np.float32)
    options = dict(num_inference_steps=2, height=HEIGHT, width=WIDTH, latents=latents)
    first, again = runner(PROMPT, seed=3, **options), runner(PROMPT, seed=3, **options)
    other = runner(PROMPT, seed=4, **options)
    assert np.array_equal(first, again)
    assert float(np.abs(first - other).max()) > 1e-3


def test_generate_cli_writes_the_image(sd, tmp_path, capsys, monkeypatch):
    from PIL import Image

    from mobius.cli import main
    from mobius_diffusion.pipeline import open_pipeline, to_pil

    _, out = sd
    image = tmp_path / "image.png"
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3", "--output", str(image)]
    args += ["--height", str(HEIGHT), "--width", str(WIDTH)]
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # as on a terminal
    assert main(args) == 0
    assert "denoising" in capsys.readouterr().err  # a bar over the steps
    expected = to_pil(
        open_pipeline(out)(PROMPT, num_inference_steps=2, seed=3, height=32, width=32)
    )[0]
    assert np.array_equal(np.asarray(Image.open(image)), np.asarray(expected))


def test_generate_cli_negative_prompt(sd, tmp_path):
    """--negative-prompt reaches the runner: the same image as the Python call with it."""
    from PIL import Image

    from mobius.cli import main
    from mobius_diffusion.pipeline import open_pipeline, to_pil

    _, out = sd
    image = tmp_path / "image.png"
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3", "--output", str(image)]
    args += ["--height", str(HEIGHT), "--width", str(WIDTH), "--negative-prompt", "blurry"]
    assert main(args) == 0
    options = dict(num_inference_steps=2, seed=3, height=HEIGHT, width=WIDTH)
    runner = open_pipeline(out)
    expected = to_pil(runner(PROMPT, negative_prompt="blurry", **options))[0]
    unguided = to_pil(runner(PROMPT, **options))[0]
    assert np.array_equal(np.asarray(Image.open(image)), np.asarray(expected))
    assert not np.array_equal(np.asarray(expected), np.asarray(unguided))


def test_vae_tiling_matches_diffusers_enable_tiling(sd, tmp_path):
    """``--vae-tiling`` decodes the 16 x 16 latents in the VAE's 8-latent tiles (its
    sample_size 16) as diffusers' ``vae.enable_tiling()``; measured ~2e-7 apart."""
    import diffusers
    import torch
    from PIL import Image

    from mobius.cli import main
    from mobius_diffusion.pipeline import open_pipeline, to_pil

    pipe, out = sd
    config = {"_class_name": "EulerDiscreteScheduler", **SCHEDULERS["EulerDiscreteScheduler"]}
    pipe.scheduler = diffusers.EulerDiscreteScheduler.from_config(config)  # others' tests swap it
    latents = np.random.default_rng(1).standard_normal((1, 4, 16, 16)).astype(np.float32)
    options = dict(num_inference_steps=2, guidance_scale=4.0, height=HEIGHT, width=WIDTH)
    pipe.vae.enable_tiling()
    try:
        with torch.no_grad():
            expected = pipe(
                PROMPT, latents=torch.from_numpy(latents), output_type="np", **options
            ).images
    finally:
        pipe.vae.disable_tiling()
    runner = open_pipeline(out)
    runner.scheduler_config = config
    runner.vae_tiling = True
    got = runner(PROMPT, latents=latents, **options)
    diff = float(np.abs(got - expected).max())
    print("tiled max abs diff", diff)
    assert diff <= 1e-3
    runner.vae_tiling = False
    assert float(np.abs(runner(PROMPT, latents=latents, **options) - got).max()) > 1e-3

    image = tmp_path / "image.png"
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3", "--output", str(image)]
    assert main([*args, "--height", "32", "--width", "32", "--vae-tiling"]) == 0
    runner = open_pipeline(out)  # the package's own scheduler, as the CLI's
    runner.vae_tiling = True
    tiled = to_pil(runner(PROMPT, num_inference_steps=2, seed=3, height=32, width=32))[0]
    assert np.array_equal(np.asarray(Image.open(image)), np.asarray(tiled))
