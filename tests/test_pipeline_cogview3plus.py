"""A tiny random CogView3-Plus pipeline: built whole with ``mobius build``, run by mobius's numpy
runner and by diffusers from the same latents, 2 steps of CogVideoXDDIMScheduler with CFG (zeros
for the unconditional rows without a negative prompt, its states with one; the size
conditioning given and defaulted): the images agree to 1e-3 on [0, 1] (measured ~1.6e-6 and
~1.4e-6)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cogview3plus_pipeline_cases import MAX_SEQUENCE_LENGTH, make_cogview3plus_pipeline
from pipeline_cases import PROMPT

from mobius.testing import build_with_cli

HEIGHT, WIDTH = 16, 24  # latents [1, 4, 8, 12]: a 4x6 patch grid, not square
LATENTS = (1, 4, 8, 12)
OPTIONS = dict(
    num_inference_steps=2, height=HEIGHT, width=WIDTH, max_sequence_length=MAX_SEQUENCE_LENGTH
)


@pytest.fixture(scope="module")
def cogview3plus(tmp_path_factory):
    """(diffusers pipeline, built package directory)."""
    root = tmp_path_factory.mktemp("cogview3plus")
    pipe = make_cogview3plus_pipeline(root / "hf")
    return pipe, build_with_cli(root / "hf", root / "onnx")


def test_cogview3plus_builds_whole_and_matches_diffusers(cogview3plus):
    import torch

    from mobius.errors import ConfigError
    from mobius_diffusion.pipeline import open_pipeline
    from mobius_diffusion.pipelines.cogview3plus import CogView3PlusRunner

    pipe, out = cogview3plus
    record = json.loads((out / "mobius.json").read_text())
    built = {m["graphs"][0]: m["model_type"] for m in record["models"]}
    assert built["text_encoder/model"] == "T5EncoderModel"
    assert built["transformer/model"] == "CogView3PlusTransformer2DModel"
    runner = open_pipeline(out)
    assert isinstance(runner, CogView3PlusRunner)

    latents = np.random.default_rng(1).standard_normal(LATENTS).astype(np.float32)
    runs = {
        "zeros for the negative": {},
        "negative prompt, sizes given": dict(
            negative_prompt="a blue bicycle",
            guidance_scale=3.0,
            original_size=(32, 40),
            crops_coords_top_left=(4, 8),
        ),
    }
    for name, options in runs.items():
        with torch.no_grad():
            expected = pipe(
                PROMPT, latents=torch.from_numpy(latents), output_type="np", **OPTIONS, **options
            ).images
        got = runner(PROMPT, latents=latents, **OPTIONS, **options)
        assert got.shape == expected.shape == (1, HEIGHT, WIDTH, 3)
        assert float(expected.std()) > 1e-3, "the image barely depends on anything"
        diff = float(np.abs(got - expected).max())
        print("cogview3plus", name, "max abs diff", diff)
        assert diff <= 1e-3

    with pytest.raises(ConfigError, match="a CogView3-Plus image is a multiple of 8 on each side"):
        runner(PROMPT, height=20, width=24, num_inference_steps=1)


def test_generate_cli_writes_the_cogview3plus_image(cogview3plus, tmp_path):
    from PIL import Image

    from mobius.cli import main
    from mobius_diffusion.pipeline import open_pipeline, to_pil

    _, out = cogview3plus
    image = tmp_path / "image.png"
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3", "--output", str(image)]
    assert main([*args, "--height", str(HEIGHT), "--width", str(WIDTH)]) == 0
    expected = open_pipeline(out)(PROMPT, num_inference_steps=2, seed=3, height=HEIGHT, width=WIDTH)
    assert np.array_equal(np.asarray(Image.open(image)), np.asarray(to_pil(expected)[0]))
