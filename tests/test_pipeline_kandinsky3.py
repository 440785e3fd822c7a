"""A tiny random Kandinsky 3 pipeline: built whole with ``mobius build`` (T5 through mobius-text,
MoVQ as a VQModel), run by mobius's numpy runner and by diffusers from the same latents, 2 DDPM
steps with guidance; the images agree to 1e-3.

DDPM adds noise after each step but the last; the test feeds diffusers mobius's draws (patched
over ``randn_tensor`` in diffusers' DDPM scheduler module). Every parameter is perturbed; the
second prompt is shorter than the first, so both are cut to the first's tokens plus one padding
token, and the second's padding is masked in the UNet's pooling and cross-attention.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from kandinsky3_pipeline_cases import make_kandinsky3_pipeline
from pipeline_cases import PROMPT

from mobius.testing import build_with_cli

HEIGHT, WIDTH = 64, 128  # latents ceil(64 / 64) * 8 = 8 x 16; MoVQ's factor 2: 16 x 32 pixels
PROMPTS = [PROMPT, "a blue bicycle"]
SEED = 5
OPTIONS = dict(num_inference_steps=2, guidance_scale=3.0, height=HEIGHT, width=WIDTH)


@pytest.fixture(scope="module")
def kandinsky3(tmp_path_factory):
    """(diffusers pipeline, built package directory)."""
    root = tmp_path_factory.mktemp("kandinsky3")
    pipe = make_kandinsky3_pipeline(root / "hf")
    return pipe, build_with_cli(root / "hf", root / "onnx")


def _feed_noise(monkeypatch):
    """diffusers' DDPM noise: the draws of mobius's scheduler generator for :data:`SEED`."""
    import diffusers.schedulers.scheduling_ddpm as ddpm
    import torch

    draws = np.random.default_rng([SEED, 1])
    monkeypatch.setattr(
        ddpm,
        "randn_tensor",
        lambda shape, **_: torch.from_numpy(draws.standard_normal(shape, dtype=np.float32)),
    )


@pytest.mark.parametrize("negative_prompt", [None, ["a red moon", "the cat"]])
def test_kandinsky3_builds_whole_and_matches_diffusers(kandinsky3, negative_prompt, monkeypatch):
    """Measured ~2e-5 to 3.1e-5 (zero negative) and ~1.7e-5 to 2.7e-5 (negative prompts),
    by torch's thread count.

    The UNet alone is ~1.7e-5 from diffusers at fp32 (ONNX Runtime is the nearer to a float64
    run of diffusers); T5, two guided steps and MoVQ carry it to the pixels."""
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = kandinsky3
    record = json.loads((out / "mobius.json").read_text())
    built = {m["graphs"][0]: m["model_type"] for m in record["models"]}
    assert built["unet/model"] == "Kandinsky3UNet"
    assert built["movq/encoder/model"] == "VQModel"
    assert built["text_encoder/model"] == "T5EncoderModel"
    latents = np.random.default_rng(1).standard_normal((2, 4, 8, 16)).astype(np.float32)
    options = dict(OPTIONS, negative_prompt=negative_prompt)
    got = open_pipeline(out)(PROMPTS, latents=latents, seed=SEED, **options)
    _feed_noise(monkeypatch)
    with torch.no_grad():
        expected = pipe(
            PROMPTS, latents=torch.from_numpy(latents), output_type="np", **options
        ).images
    assert got.shape == expected.shape == (2, 16, 32, 3)
    assert float(expected.std()) > 1e-3, "the image barely depends on anything"
    assert float(np.abs(expected[0] - expected[1]).max()) > 1e-3, "the prompt changes nothing"
    diff = float(np.abs(got - expected).max())
    print(negative_prompt, "max abs diff", diff)
    assert diff <= 1e-3


def test_generate_cli_writes_the_image(kandinsky3, tmp_path, monkeypatch, capsys):
    from PIL import Image

    from mobius.cli import main

    monkeypatch.chdir(tmp_path)
    argv = ["generate", str(kandinsky3[1]), PROMPT, "--steps", "2", "--height", "64"]
    assert main([*argv, "--width", "64"]) == 0
    assert Image.open(tmp_path / "image.png").size == (16, 16)
    # the movq is no VAE with a tiled decode: --vae-tiling is refused before denoising
    assert main([*argv, "--width", "64", "--vae-tiling"]) != 0
    assert "--vae-tiling: a Kandinsky3Pipeline decodes with no vae" in capsys.readouterr().err
