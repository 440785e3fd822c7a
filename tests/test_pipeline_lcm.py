"""A tiny random latent consistency model pipeline (LCM's UNet with the guidance-scale
embedding, LCMScheduler): built whole with ``mobius build``, run by mobius's numpy runner
and by diffusers from the same latents; the images agree to 1e-3.

LCMScheduler re-noises between steps, so 3 steps: the noise of the steps in between is
drawn in each library by its own generator. The test feeds diffusers mobius's draws
(patched over ``randn_tensor`` in diffusers' LCM scheduler module).
"""

from __future__ import annotations

import numpy as np
import pytest
from pipeline_cases import PROMPT, make_sd_pipeline

from mobius.testing import build_with_cli

HEIGHT = WIDTH = 32  # latents 16 x 16


@pytest.fixture(scope="module")
def lcm(tmp_path_factory):
    """(diffusers pipeline, built package directory)."""
    root = tmp_path_factory.mktemp("lcm")
    pipe = make_sd_pipeline(root / "hf", lcm=True)
    return pipe, build_with_cli(root / "hf", root / "onnx")


@pytest.mark.parametrize("steps", [1, 3])
def test_lcm_image_matches_diffusers(lcm, steps, monkeypatch):
    import diffusers.schedulers.scheduling_lcm as scheduling_lcm
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = lcm
    runner = open_pipeline(out)
    latents = np.random.default_rng(1).standard_normal((1, 4, 16, 16)).astype(np.float32)
    options = dict(num_inference_steps=steps, guidance_scale=6.0, height=HEIGHT, width=WIDTH)
    got = runner(PROMPT, latents=latents, seed=5, **options)

    # the same re-noising draws, in the order mobius's scheduler took them
    draws = np.random.default_rng([5, 1])
    monkeypatch.setattr(
        scheduling_lcm,
        "randn_tensor",
        lambda shape, **_: torch.from_numpy(draws.standard_normal(shape, dtype=np.float32)),
    )
    with torch.no_grad():
        expected = pipe(
            PROMPT, latents=torch.from_numpy(latents), output_type="np", **options
        ).images
    diff = float(np.abs(got - expected).max())
    print(steps, "steps: max abs diff", diff)  # measured 7.2e-7 (1 step), 4.8e-7 (3 steps)
    assert diff <= 1e-3
    assert float(expected.std()) > 1e-3, "the image barely depends on anything"


def test_guidance_scale_changes_the_image(lcm):
    from mobius_diffusion.pipeline import open_pipeline

    runner = open_pipeline(lcm[1])
    options = dict(num_inference_steps=2, height=HEIGHT, width=WIDTH, seed=0)
    a, b = runner(PROMPT, guidance_scale=2.0, **options), runner(PROMPT, **options)
    assert float(np.abs(a - b).max()) > 1e-3


def test_negative_prompt_is_refused(lcm):
    from mobius.errors import ConfigError
    from mobius_diffusion.pipeline import open_pipeline

    with pytest.raises(ConfigError, match="no negative prompt"):
        open_pipeline(lcm[1])(PROMPT, negative_prompt="blurry", num_inference_steps=1)


def test_generate_cli_writes_the_image(lcm, tmp_path, monkeypatch):
    from PIL import Image

    from mobius.cli import main

    monkeypatch.chdir(tmp_path)
    code = main(["generate", str(lcm[1]), PROMPT, "--steps", "2", "--seed", "0",
                 "--height", "32", "--width", "32", "--output", "lcm.png"])  # fmt: skip
    assert code == 0
    assert Image.open(tmp_path / "lcm.png").size == (WIDTH, HEIGHT)
