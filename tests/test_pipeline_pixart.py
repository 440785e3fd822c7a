"""Tiny random PixArt-α and PixArt-Σ pipelines: built whole with ``mobius build``, run by
mobius's numpy runner and by diffusers from the same latents, 2 steps (α DDIM, Σ DPM-Solver++
as the PixArt repos); the images agree to 1e-3 (measured ~1e-6).

Every parameter is perturbed. The α pipeline is saved as the hub holds PixArt-XL-2-1024-MS:
its transformer a legacy ``Transformer2DModel`` config (``norm_type`` ada_norm_single,
``sample_size`` 128, so size-conditioned by diffusers' default); both have a learned
sigma, T5 with padding masks, and a negative prompt.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from pipeline_cases import PROMPT
from transformer_pipeline_cases import make_pixart_pipeline, write_legacy_transformer_config

from mobius.errors import ConfigError
from mobius.testing import build_with_cli

HEIGHT, WIDTH = 32, 24  # latents 16 x 12: an 8 x 6 patch grid
MAX_SEQUENCE_LENGTH = 8  # the prompt's 7 T5 tokens and a pad; "" is all pads but </s>
OPTIONS = dict(num_inference_steps=2, guidance_scale=3.5, height=HEIGHT, width=WIDTH)


@pytest.fixture(scope="module")
def alpha(tmp_path_factory):
    """(diffusers pipeline, the legacy config written, built package directory)."""
    root = tmp_path_factory.mktemp("pixart-alpha")
    pipe = make_pixart_pipeline(root / "hf", "PixArtAlphaPipeline", sample_size=128)
    legacy = write_legacy_transformer_config(root / "hf", "ada_norm_single")
    return pipe, legacy, build_with_cli(root / "hf", root / "onnx")


@pytest.fixture(scope="module")
def sigma(tmp_path_factory):
    """(diffusers pipeline, built package directory) of PixArt-Σ, its transformer as diffusers saves it."""
    root = tmp_path_factory.mktemp("pixart-sigma")
    pipe = make_pixart_pipeline(root / "hf", "PixArtSigmaPipeline", sample_size=16)
    return pipe, build_with_cli(root / "hf", root / "onnx")


def _compare(pipe, out, **options):
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    latents = np.random.default_rng(1).standard_normal((1, 4, 16, 12)).astype(np.float32)
    options = dict(OPTIONS, max_sequence_length=MAX_SEQUENCE_LENGTH, **options)
    with torch.no_grad():
        expected = pipe(
            PROMPT,
            latents=torch.from_numpy(latents),
            output_type="np",
            use_resolution_binning=False,
            clean_caption=False,
            **options,
        ).images
    got = open_pipeline(out)(PROMPT, latents=latents, **options)
    assert got.shape == expected.shape == (1, HEIGHT, WIDTH, 3)
    assert float(expected.std()) > 1e-3, "the image barely depends on anything"
    return float(np.abs(got - expected).max())


def test_alpha_legacy_transformer_builds_and_matches_diffusers(alpha):
    pipe, legacy, out = alpha
    assert legacy["_class_name"] == "Transformer2DModel"
    assert "use_additional_conditions" not in legacy or legacy["use_additional_conditions"] is None
    record = json.loads((out / "mobius.json").read_text())
    built = {m["graphs"][0]: m["model_type"] for m in record["models"]}
    assert built["transformer/model"] == "PixArtTransformer2DModel"
    diff = _compare(pipe, out, negative_prompt="a blue bicycle")
    print("pixart-alpha max abs diff", diff)
    assert diff <= 1e-3


def test_alpha_feeds_the_size_conditioning(alpha):
    from mobius_diffusion.pipeline import open_pipeline

    _, _, out = alpha
    runner = open_pipeline(out)
    assert {"resolution", "aspect_ratio"} <= runner.graph_inputs("transformer/model")
    feeds = runner.size_conditioning(2, HEIGHT, WIDTH)
    assert feeds["resolution"].tolist() == [[32, 24]] * 2
    assert np.allclose(feeds["aspect_ratio"], 32 / 24)
    with pytest.raises(ConfigError, match="2 or more steps"):
        runner(PROMPT, num_inference_steps=1, height=HEIGHT, width=WIDTH, seed=0)


def test_sigma_matches_diffusers(sigma):
    pipe, out = sigma
    diff = _compare(pipe, out)
    print("pixart-sigma max abs diff", diff)
    assert diff <= 1e-3


def test_generate_cli_writes_the_pixart_image(sigma, tmp_path, capsys):
    from PIL import Image

    from mobius.cli import main
    from mobius_diffusion.pipeline import open_pipeline, to_pil

    _, out = sigma
    image = tmp_path / "image.png"
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3", "--output", str(image)]
    assert main([*args, "--height", str(HEIGHT), "--width", str(WIDTH)]) == 0
    expected = open_pipeline(out)(PROMPT, num_inference_steps=2, seed=3, height=HEIGHT, width=WIDTH)
    assert np.array_equal(np.asarray(Image.open(image)), np.asarray(to_pil(expected)[0]))
    # a class id is for DiT packages: refused in one line
    assert main([*args, "--class-label", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("mobius: error: --class-label is for class-conditional (DiT)"), err
    assert len(err.splitlines()) == 1
