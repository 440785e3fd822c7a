"""A tiny random SD3 pipeline: built whole with ``mobius build``, run by mobius's numpy runner
and by diffusers from the same latents, 2 steps; the images agree to 1e-3 (measured ~1.7e-6).

Every parameter is perturbed: CLIP-L, CLIP-G, T5, an SD3.5-style transformer (QK norm,
dual attention), a VAE with a shift factor; flow matching with dynamic shifting. The
same build run without T5 (``text_encoder_3`` null: zeros in its place, as diffusers) and
with SD3-medium's scheduler (a fixed shift).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from pipeline_cases import PROMPT
from transformer_pipeline_cases import make_sd3_pipeline

from mobius.testing import build_with_cli

HEIGHT, WIDTH = 32, 24  # latents 16 x 12: an 8 x 6 patch grid
OPTIONS = dict(num_inference_steps=2, guidance_scale=3.0, height=HEIGHT, width=WIDTH)
MAX_SEQUENCE_LENGTH = 10


@pytest.fixture(scope="module")
def sd3(tmp_path_factory):
    """(diffusers pipeline, built package directory, the same latents for both)."""
    root = tmp_path_factory.mktemp("sd3")
    pipe = make_sd3_pipeline(root / "hf")
    out = build_with_cli(root / "hf", root / "onnx")
    latents = np.random.default_rng(1).standard_normal((1, 4, 16, 12)).astype(np.float32)
    return pipe, out, latents


def _diffusers_image(pipe, latents, **options):
    import torch

    with torch.no_grad():
        return pipe(
            PROMPT,
            latents=torch.from_numpy(latents),
            output_type="np",
            max_sequence_length=MAX_SEQUENCE_LENGTH,
            **options,
        ).images


def test_sd3_image_matches_diffusers(sd3):
    from mobius_diffusion.pipeline import StableDiffusion3Runner, open_pipeline

    pipe, out, latents = sd3
    for graph in ("transformer/model", "text_encoder_3/model", "vae/decoder/model"):
        assert (out / f"{graph}.onnx").is_file(), graph
    expected = _diffusers_image(pipe, latents, negative_prompt="a blue cat", **OPTIONS)
    runner = open_pipeline(out)
    assert isinstance(runner, StableDiffusion3Runner)
    got = runner(
        PROMPT,
        latents=latents,
        negative_prompt="a blue cat",
        max_sequence_length=MAX_SEQUENCE_LENGTH,
        **OPTIONS,
    )
    assert got.shape == expected.shape == (1, HEIGHT, WIDTH, 3)
    diff = float(np.abs(got - expected).max())
    print("sd3 max abs diff", diff)
    assert diff <= 1e-3
    assert float(expected.std()) > 1e-3, "the image barely depends on anything"


def test_sd3_without_t5_matches_diffusers(sd3, tmp_path):
    """Also SD3-medium's scheduler: a fixed shift of 3, no dynamic shifting."""
    from diffusers import FlowMatchEulerDiscreteScheduler, StableDiffusion3Pipeline

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out, latents = sd3
    no_t5 = tmp_path / "no-t5"
    shutil.copytree(out, no_t5, ignore=shutil.ignore_patterns("text_encoder_3", "tokenizer_3"))
    index = json.loads((no_t5 / "model_index.json").read_text())
    index.update(text_encoder_3=[None, None], tokenizer_3=[None, None])
    (no_t5 / "model_index.json").write_text(json.dumps(index))
    scheduler = {"_class_name": "FlowMatchEulerDiscreteScheduler", "shift": 3.0}
    (no_t5 / "scheduler" / "scheduler_config.json").write_text(json.dumps(scheduler))
    parts = dict(pipe.components, text_encoder_3=None, tokenizer_3=None)
    parts["scheduler"] = FlowMatchEulerDiscreteScheduler.from_config(scheduler)
    expected = _diffusers_image(StableDiffusion3Pipeline(**parts), latents, **OPTIONS)
    got = open_pipeline(no_t5)(
        PROMPT, latents=latents, max_sequence_length=MAX_SEQUENCE_LENGTH, **OPTIONS
    )
    diff = float(np.abs(got - expected).max())
    print("sd3 without T5 max abs diff", diff)
    assert diff <= 1e-3


def test_generate_cli_writes_the_sd3_image(sd3, tmp_path):
    from PIL import Image

    from mobius.cli import main
    from mobius_diffusion.pipeline import open_pipeline, to_pil

    _, out, _ = sd3
    image = tmp_path / "image.png"
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3", "--output", str(image)]
    assert main([*args, "--height", str(HEIGHT), "--width", str(WIDTH)]) == 0
    expected = open_pipeline(out)(PROMPT, num_inference_steps=2, seed=3, height=HEIGHT, width=WIDTH)
    assert np.array_equal(np.asarray(Image.open(image)), np.asarray(to_pil(expected)[0]))
