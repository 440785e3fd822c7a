"""A tiny random Qwen-Image pipeline: built whole with ``mobius build`` (its Qwen2.5-VL text
encoder through mobius-text's text-encoder task, the transformer, the causal VAE), run by
mobius's numpy runner and by diffusers from the same packed latents, 2 flow-matching steps
with the dynamic shift and true CFG; the images agree to 1e-3 on [0, 1] (measured ~1e-6).

Every parameter is perturbed. The prompt goes into Qwen-Image's chat template, whose 34
leading tokens are dropped from the states; the negative prompt is longer than the prompt, two
prompts of two lengths are padded and masked, the VAE's latents_mean/std are not 0/1: each changes the image if mishandled.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from pipeline_cases import PROMPT
from qwen_image_pipeline_cases import make_qwen_image_pipeline

from mobius.errors import ConfigError
from mobius.testing import build_with_cli

HEIGHT, WIDTH = 32, 24  # the VAE's factor 4: latents 8 x 6, packed into 4 x 3 = 12 tokens
OPTIONS = dict(num_inference_steps=2, height=HEIGHT, width=WIDTH)


@pytest.fixture(scope="module")
def qwen_image(tmp_path_factory):
    """(diffusers pipeline, built package directory)."""
    root = tmp_path_factory.mktemp("qwen-image")
    pipe = make_qwen_image_pipeline(root / "hf")
    return pipe, build_with_cli(root / "hf", root / "onnx")


def test_qwen_image_builds_whole_and_matches_diffusers(qwen_image):
    import torch

    from mobius_diffusion.pipeline import QwenImageRunner, open_pipeline, pack_latents

    pipe, out = qwen_image
    record = json.loads((out / "mobius.json").read_text())
    built = {m["graphs"][0]: m["model_type"] for m in record["models"]}
    assert built["text_encoder/model"] == "Qwen2_5_VLTextModel"
    assert built["transformer/model"] == "QwenImageTransformer2DModel"
    assert built["vae/encoder/model"] == "AutoencoderKLQwenImage"
    runner = open_pipeline(out)
    assert isinstance(runner, QwenImageRunner)

    noise = np.random.default_rng(1).standard_normal((2, 4, 8, 6)).astype(np.float32)
    latents = pack_latents(noise)
    guided = dict(OPTIONS, negative_prompt="a blue bicycle on the moon", true_cfg_scale=4.0)
    # one prompt with a longer negative one (true CFG); two prompts of two lengths (the
    # shorter zero-padded and masked), unguided
    cases = [([PROMPT], latents[:1], guided), ([PROMPT, "a cat"], latents, OPTIONS)]
    images = []
    for prompts, start, options in cases:
        with torch.no_grad():
            expected = pipe(
                prompts, latents=torch.from_numpy(start), output_type="np", **options
            ).images
        got = runner(prompts, latents=start, **options)
        assert got.shape == expected.shape == (len(prompts), HEIGHT, WIDTH, 3)
        assert float(expected.std()) > 1e-3, "the image barely depends on anything"
        diff = float(np.abs(got - expected).max())
        print("qwen-image", len(prompts), "prompts, max abs diff", diff)
        assert diff <= 1e-3
        images.append(got)
    # the negative prompt is read: without it (no guidance) another image
    assert float(np.abs(images[0][0] - images[1][0]).max()) > 1e-3


def test_generate_cli_writes_the_qwen_image(qwen_image, tmp_path):
    from PIL import Image

    from mobius.cli import main
    from mobius_diffusion.pipeline import open_pipeline, to_pil

    _, out = qwen_image
    image = tmp_path / "image.png"
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3", "--output", str(image)]
    assert main([*args, "--height", str(HEIGHT), "--width", str(WIDTH)]) == 0
    expected = open_pipeline(out)(PROMPT, num_inference_steps=2, seed=3, height=HEIGHT, width=WIDTH)
    assert np.array_equal(np.asarray(Image.open(image)), np.asarray(to_pil(expected)[0]))


def test_qwen_image_refuses_a_size_it_would_round(qwen_image, capsys):
    from mobius.cli import main
    from mobius_diffusion.pipeline import open_pipeline

    _, out = qwen_image
    args = ["generate", str(out), PROMPT, "--steps", "1", "--height", "30", "--width", "24"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "height and width are multiples of 8, not 30 x 24" in err, err
    assert len(err.strip().splitlines()) == 1
    with pytest.raises(ConfigError, match="true_cfg_scale or guidance_scale"):
        open_pipeline(out)(PROMPT, true_cfg_scale=2.0, guidance_scale=2.0)
