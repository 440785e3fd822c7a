"""A tiny random DDPM pipeline (an unconditional UNet2DModel over pixels): built whole with
``mobius build``, run by mobius's numpy runner and by diffusers' ``DDPMPipeline`` from the same
initial noise, 2 steps; the images agree to 1e-3.

DDPM adds noise after every step but the last; the test feeds diffusers mobius's draws
(patched over ``randn_tensor`` in the pipeline's module, the initial noise, and in DDPM's
scheduler module, each step's noise). DDIM (no noise after the first) runs the same package.
Every parameter of the UNet is perturbed; its sample_size is not square.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from ddpm_pipeline_cases import DDPM_SIZE, make_ddpm_pipeline

from mobius.cli import main
from mobius.errors import ConfigError
from mobius.testing import build_with_cli

SEED = 5
SCHEDULERS = {
    "DDPMScheduler": {},
    "DDIMScheduler": dict(clip_sample=True, set_alpha_to_one=True),
}


@pytest.fixture(scope="module")
def ddpm(tmp_path_factory):
    """(diffusers pipeline, built package directory)."""
    root = tmp_path_factory.mktemp("ddpm")
    pipe = make_ddpm_pipeline(root / "hf")
    return pipe, build_with_cli(root / "hf", root / "onnx")


def _feed_noise(monkeypatch):
    """diffusers' draws as mobius draws them for SEED: the initial noise from
    ``default_rng(SEED)`` (:meth:`PipelineRunner.initial_noise`, float64 cast to float32),
    each DDPM step's from the scheduler's ``default_rng([SEED, 1])`` (float32)."""
    import diffusers.pipelines.ddpm.pipeline_ddpm as pipeline
    import diffusers.schedulers.scheduling_ddpm as scheduler
    import torch

    initial, steps = np.random.default_rng(SEED), np.random.default_rng([SEED, 1])

    def initial_noise(shape, **_):
        return torch.from_numpy(initial.standard_normal(tuple(shape)).astype(np.float32))

    def step_noise(shape, **_):
        return torch.from_numpy(steps.standard_normal(tuple(shape), dtype=np.float32))

    monkeypatch.setattr(pipeline, "randn_tensor", initial_noise)
    monkeypatch.setattr(scheduler, "randn_tensor", step_noise)


def test_package_layout(ddpm):
    _, out = ddpm
    record = json.loads((out / "mobius.json").read_text())
    assert {m["graphs"][0]: m["model_type"] for m in record["models"]} == {
        "unet/model": "UNet2DModel"
    }
    assert json.loads((out / "model_index.json").read_text())["_class_name"] == "DDPMPipeline"
    assert (out / "scheduler" / "scheduler_config.json").is_file()


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_ddpm_image_matches_diffusers(ddpm, scheduler, monkeypatch):
    """Measured ~1.8e-6 (DDPM and DDIM): the UNet's float32 error, no VAE after it."""
    import diffusers
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = ddpm
    config = {"_class_name": scheduler, **SCHEDULERS[scheduler]}
    pipe.scheduler = getattr(diffusers, scheduler).from_config(config)
    runner = open_pipeline(out)
    runner.scheduler_config = config
    got = runner("", batch_size=2, num_inference_steps=2, seed=SEED)
    _feed_noise(monkeypatch)
    with torch.no_grad():
        expected = pipe(batch_size=2, num_inference_steps=2, output_type="np").images
    assert got.shape == expected.shape == (2, *DDPM_SIZE, 3)
    assert float(expected.std()) > 1e-3, "the image barely depends on anything"
    assert float(np.abs(expected[0] - expected[1]).max()) > 1e-3, "the noise changes nothing"
    diff = float(np.abs(got - expected).max())
    print(scheduler, "max abs diff", diff)
    assert diff <= 1e-3


def test_generate_cli_writes_the_image(ddpm, tmp_path):
    from PIL import Image

    from mobius_diffusion.pipeline import open_pipeline, to_pil

    _, out = ddpm
    image = tmp_path / "image.png"
    args = ["generate", str(out), "", "--steps", "2", "--seed", "3", "--output", str(image)]
    assert main(args) == 0
    expected = to_pil(open_pipeline(out)("", num_inference_steps=2, seed=3))[0]
    assert Image.open(image).size == (DDPM_SIZE[1], DDPM_SIZE[0])
    assert np.array_equal(np.asarray(Image.open(image)), np.asarray(expected))


def test_refusals_are_one_line(ddpm, tmp_path, capsys):
    from mobius_diffusion.pipeline import open_pipeline

    _, out = ddpm
    base = ["generate", str(out)]
    image = ["--output", str(tmp_path / "x.png"), "--steps", "1"]
    for argv, expected in (
        ([*base, "a red cat", *image], 'give the empty prompt ""'),
        ([*base, "", "--height", "16", *image], "it takes no height"),
        ([*base, "", "--guidance-scale", "3", *image], "it takes no guidance_scale"),
        ([*base, "", "--negative-prompt", "cat", *image], "takes no negative prompt"),
    ):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and err.startswith("mobius: error: "), err
        assert expected in err, err
    with pytest.raises(ConfigError, match=r"latents of shape \(1, 3, 8, 8\) given"):
        open_pipeline(out)("", latents=np.zeros((1, 3, 8, 8), np.float32))
