"""A tiny random SDXL pipeline: built whole with ``mobius build``, run by mobius's numpy runner
and by diffusers' ``StableDiffusionXLPipeline`` from the same initial latents, 2 steps; the
images agree to 1e-3.

Every parameter of both text encoders, the UNet and the VAE is perturbed. The cases
cover the zeroed unconditional rows (``force_zeros_for_empty_prompt``), the empty
negative prompt encoded, explicit second prompts and size conditioning, and a batch.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from pipeline_cases import PROMPT, make_sdxl_pipeline

from mobius.testing import build_with_cli

HEIGHT = WIDTH = 32  # latents 16 x 16 (the VAE halves once)
CASES = {
    "zeros-for-empty-prompt": ({}, {}),
    "empty-negative-prompt": ({"force_zeros_for_empty_prompt": False}, {}),
    "second-prompts-and-sizes": (
        {},
        dict(
            prompt_2="a blue bicycle",
            negative_prompt="the moon",
            negative_prompt_2="a cat",
            original_size=(64, 48),
            crops_coords_top_left=(4, 8),
            target_size=(40, 32),
        ),
    ),
    "batch-of-two": (
        {},
        dict(prompt=[PROMPT, "a blue bicycle"], negative_prompt=["the moon", "a cat"]),
    ),
}


@pytest.fixture(scope="module")
def sdxl(tmp_path_factory):
    """(diffusers pipeline, built package directory)."""
    root = tmp_path_factory.mktemp("sdxl")
    pipe = make_sdxl_pipeline(root / "hf")
    # --validate: each component against its own library's reading (CLIP with projection too)
    out = build_with_cli(root / "hf", root / "onnx", "--validate")
    return pipe, out


def test_package_layout(sdxl):
    _, out = sdxl
    validation = json.loads((out / "mobius.json").read_text())["validation"]
    assert validation["passed"] and "CLIPTextModelWithProjection" in validation["reference"]
    for graph in ("unet/model", "vae/decoder/model", "text_encoder/model", "text_encoder_2/model"):
        assert (out / f"{graph}.onnx").is_file(), graph
    index = json.loads((out / "model_index.json").read_text())
    assert index["_class_name"] == "StableDiffusionXLPipeline"
    assert index["force_zeros_for_empty_prompt"] is True
    for name in ("tokenizer", "tokenizer_2"):
        assert (out / name / "tokenizer_config.json").is_file()


@pytest.mark.parametrize("case", sorted(CASES))
def test_sdxl_image_matches_diffusers(sdxl, case):
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = sdxl
    index_options, options = CASES[case]
    pipe.register_to_config(**{"force_zeros_for_empty_prompt": True, **index_options})
    options = dict(options, num_inference_steps=2, guidance_scale=4.0, height=HEIGHT, width=WIDTH)
    prompt = options.pop("prompt", PROMPT)
    batch = 1 if isinstance(prompt, str) else len(prompt)
    latents = np.random.default_rng(1).standard_normal((batch, 4, 16, 16)).astype(np.float32)
    with torch.no_grad():
        expected = pipe(
            prompt, latents=torch.from_numpy(latents), output_type="np", **options
        ).images

    runner = open_pipeline(out)
    runner.index.update(index_options)
    got = runner(prompt, latents=latents, **options)
    assert got.shape == expected.shape == (batch, HEIGHT, WIDTH, 3)
    diff = float(np.abs(got - expected).max())
    print(case, "max abs diff", diff)
    assert diff <= 1e-3
    assert float(expected.std()) > 1e-3, "the image barely depends on anything"


def test_conditioning_changes_the_image(sdxl):
    """The prompt, the second prompt and the size ids each reach the image."""
    from mobius_diffusion.pipeline import open_pipeline

    runner = open_pipeline(sdxl[1])
    options = dict(num_inference_steps=2, height=HEIGHT, width=WIDTH, seed=0)
    base = runner(PROMPT, **options)
    for change in (
        dict(prompt="a blue bicycle"),
        dict(prompt_2="a blue bicycle"),
        dict(original_size=(64, 64)),
    ):
        image = runner(**{"prompt": PROMPT, **options, **change})
        assert float(np.abs(image - base).max()) > 1e-3, change
