"""A tiny random Z-Image pipeline: built whole with ``mobius build`` (its bare Qwen3 text encoder
through mobius-text's text-encoder task with ``hidden_states[-2]``, the Z-Image transformer, the
VAE), run by mobius's numpy runner and by diffusers from the same latents, 2 flow-matching
steps; the images agree to 1e-3 on [0, 1] (measured ~1e-6).

Every parameter is perturbed. The prompt goes through the chat template (thinking on), and only
its real tokens reach the transformer: prompts of different lengths, one over 32 tokens (the
transformer pads each caption to a multiple of 32 with a learned token), are batched; the 4 x 6
patch grid is padded to 32 tokens too. Guidance (on at any scale above 0) runs the negative
prompt in the same batch, with the norm cap (``cfg_normalization``) and, at a step past
``cfg_truncation``, the conditional prediction alone; the VAE has a shift factor.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from pipeline_cases import PROMPT
from z_image_pipeline_cases import make_z_image_pipeline

from mobius.errors import ConfigError
from mobius.testing import build_with_cli

HEIGHT, WIDTH = 16, 24  # the VAE's factor 2 and 2x2 patches: a 4 x 6 patch grid
LONG_PROMPT = " ".join([PROMPT, "on the blue bicycle"] * 3)  # 30 words, 38 tokens in the chat
OPTIONS = dict(num_inference_steps=2, height=HEIGHT, width=WIDTH, max_sequence_length=48)


@pytest.fixture(scope="module")
def z_image(tmp_path_factory):
    """(diffusers pipeline, built package directory)."""
    root = tmp_path_factory.mktemp("z-image")
    pipe = make_z_image_pipeline(root / "hf")
    return pipe, build_with_cli(root / "hf", root / "onnx")


def test_z_image_builds_whole_and_matches_diffusers(z_image, tmp_path):
    """Three calls, each within 1e-3 of diffusers (measured ~1e-6): one prompt with CFG on a
    negative prompt and the norm cap; a short and a long prompt unguided (Z-Image-Turbo's
    scale 0); two prompts guided at the first step only (``cfg_truncation``). Then one
    ``mobius generate`` run, equal to the runner's image."""
    import torch
    from PIL import Image

    from mobius.cli import main
    from mobius_diffusion.pipeline import ZImageRunner, open_pipeline, to_pil

    pipe, out = z_image
    record = json.loads((out / "mobius.json").read_text())
    built = {g: m["model_type"] for m in record["models"] for g in m["graphs"]}
    assert built["text_encoder/model"] == "Qwen3Model"
    assert built["transformer/model"] == "ZImageTransformer2DModel"
    runner = open_pipeline(out)
    assert isinstance(runner, ZImageRunner)

    latents = np.random.default_rng(1).standard_normal((2, 4, 8, 12)).astype(np.float32)
    cases = [
        ([PROMPT], latents[:1], dict(guidance_scale=4.0, cfg_normalization=True)),
        (["a cat", LONG_PROMPT], latents, dict(guidance_scale=0.0)),
        ([PROMPT, "a cat"], latents, dict(guidance_scale=3.0, cfg_truncation=0.1)),
    ]
    images = []
    for prompts, start, guidance in cases:
        call = dict(OPTIONS, **guidance)
        negative = "blue" if len(prompts) == 1 else None
        with torch.no_grad():
            expected = pipe(
                prompt=list(prompts),  # diffusers writes the templated prompts into the list
                negative_prompt=negative,
                latents=torch.from_numpy(start),
                output_type="np",
                **call,
            ).images
        got = runner(prompts, negative_prompt=negative, latents=start, **call)
        assert got.shape == expected.shape == (len(prompts), HEIGHT, WIDTH, 3)
        assert float(expected.std()) > 1e-3, "the image barely depends on anything"
        diff = float(np.abs(got - expected).max())
        print("z-image", len(prompts), "prompts", guidance, "max abs diff", diff)
        assert diff <= 1e-3
        images.append(got)
    # guidance, and its truncation, change the image
    assert float(np.abs(images[1][0] - images[2][1]).max()) > 1e-3

    image = tmp_path / "image.png"
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3", "--output", str(image)]
    assert main([*args, "--height", str(HEIGHT), "--width", str(WIDTH)]) == 0
    expected = runner(PROMPT, num_inference_steps=2, seed=3, height=HEIGHT, width=WIDTH)
    assert np.array_equal(np.asarray(Image.open(image)), np.asarray(to_pil(expected)[0]))
    with pytest.raises(ConfigError, match="multiples of 4, not 18 x 24"):
        runner(PROMPT, height=18, width=WIDTH)
    with pytest.raises(ConfigError, match="latents of shape"):
        runner(PROMPT, latents=np.zeros((1, 4, 2, 2), np.float32), height=HEIGHT, width=WIDTH)
