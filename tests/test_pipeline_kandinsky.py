"""A tiny random Kandinsky 2.2 combined pipeline: built whole with ``mobius build`` (the prior's
CLIP text and vision encoders through mobius-text and mobius-vision), run by mobius's numpy
runner and by diffusers' prior and decoder pipelines (what the combined pipeline calls) from the
same latents, 2 UnCLIP prior steps and 2 DDPM steps, both guided; the images agree to 1e-3.

Both schedulers add noise after each step but the last; the test feeds diffusers mobius's draws
(patched over ``randn_tensor`` in diffusers' UnCLIP and DDPM scheduler modules). Every
parameter is perturbed; the second prompt is shorter than the first (the prior's text mask).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from kandinsky_pipeline_cases import WIDTH, make_kandinsky_pipeline
from pipeline_cases import PROMPT

from mobius.testing import build_with_cli

HEIGHT, IMAGE_WIDTH = 16, 24  # MoVQ's factor 2: latents ceil(16 / 4) * 2 = 8 x 12
PROMPTS = [PROMPT, "a blue bicycle"]
SEED = 5


@pytest.fixture(scope="module")
def kandinsky(tmp_path_factory):
    """(diffusers pipeline, built package directory)."""
    root = tmp_path_factory.mktemp("kandinsky")
    pipe = make_kandinsky_pipeline(root / "hf")
    return pipe, build_with_cli(root / "hf", root / "onnx")


def _feed_noise(monkeypatch):
    """diffusers' scheduler noise: the draws of mobius's generators for :data:`SEED`."""
    import diffusers.schedulers.scheduling_ddpm as ddpm
    import diffusers.schedulers.scheduling_unclip as unclip
    import torch

    for module, stream in ((unclip, SEED), (ddpm, [SEED, 1])):
        draws = np.random.default_rng(stream)
        monkeypatch.setattr(
            module,
            "randn_tensor",
            lambda shape, d=draws, **_: torch.from_numpy(
                d.standard_normal(shape, dtype=np.float32)
            ),
        )


def _diffusers(pipe, prompts, prior_latents, latents, negative_prompt=None):
    """What ``KandinskyV22CombinedPipeline.__call__`` runs, with the decoder's latents given."""
    import torch

    with torch.no_grad():
        image_embeds, negative_embeds = pipe.prior_pipe(
            prompts,
            negative_prompt=negative_prompt,
            num_inference_steps=2,
            latents=torch.from_numpy(prior_latents),
            guidance_scale=3.0,
            return_dict=False,
        )
        return pipe.decoder_pipe(
            image_embeds=image_embeds,
            negative_image_embeds=negative_embeds,
            height=HEIGHT,
            width=IMAGE_WIDTH,
            num_inference_steps=2,
            latents=torch.from_numpy(latents),
            guidance_scale=5.0,
            output_type="np",
        ).images


@pytest.mark.parametrize("negative_prompt", [None, ["a red moon", "a cat"]])
def test_kandinsky_builds_whole_and_matches_diffusers(kandinsky, negative_prompt, monkeypatch):
    """Measured ~1.3e-4 (zero-image negative) and ~2.2e-5 (negative prompts).

    Larger than a flow pipeline's: the prior's image embeddings agree to ~5e-8 and one
    decoder step to ~1e-7, but the first DDPM step divides by sqrt(alpha_cumprod) (~0.4)
    into latents of scale ~10, whose second UNet pass (float32, ~1.5e-6 of scale 2) is
    guided at 5: ~3e-5 in the latents, ~1e-4 on the pixels after MoVQ.
    """
    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = kandinsky
    record = json.loads((out / "mobius.json").read_text())
    built = {m["graphs"][0]: m["model_type"] for m in record["models"]}
    assert built["prior_prior/model"] == "PriorTransformer"
    assert built["prior_text_encoder/model"] == "clip_text_model"
    assert built["prior_image_encoder/model"] == "clip_vision_model"
    assert built["unet/model"] == "UNet2DConditionModel"
    assert built["movq/encoder/model"] == "VQModel"
    rng = np.random.default_rng(1)
    rows = len(PROMPTS) * (1 if negative_prompt is None else 2)
    prior_latents = rng.standard_normal((rows, WIDTH)).astype(np.float32)
    latents = rng.standard_normal((len(PROMPTS), 4, 8, 12)).astype(np.float32)
    got = open_pipeline(out)(
        PROMPTS,
        negative_prompt=negative_prompt,
        num_inference_steps=2,
        prior_num_inference_steps=2,
        guidance_scale=5.0,
        prior_guidance_scale=3.0,
        height=HEIGHT,
        width=IMAGE_WIDTH,
        latents=latents,
        prior_latents=prior_latents,
        seed=SEED,
    )
    _feed_noise(monkeypatch)
    expected = _diffusers(pipe, PROMPTS, prior_latents, latents, negative_prompt)
    assert got.shape == expected.shape == (len(PROMPTS), HEIGHT, IMAGE_WIDTH, 3)
    assert float(expected.std()) > 1e-3, "the image barely depends on anything"
    assert float(np.abs(expected[0] - expected[1]).max()) > 1e-3, "the prompt changes nothing"
    diff = float(np.abs(got - expected).max())
    print(negative_prompt, "max abs diff", diff)
    assert diff <= 1e-3


def test_generate_cli_writes_the_image(kandinsky, tmp_path, monkeypatch):
    from PIL import Image

    from mobius.cli import main

    monkeypatch.chdir(tmp_path)
    code = main(
        ["generate", str(kandinsky[1]), PROMPT, "--steps", "2", "--height", "16", "--width", "24"]
    )
    assert code == 0
    assert Image.open(tmp_path / "image.png").size == (24, 16)
