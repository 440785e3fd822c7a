"""A tiny random Flux pipeline: built whole with ``mobius build`` (CLIP and T5 encoder, Flux
transformer, VAE with a shift factor), run by mobius's numpy runner and by diffusers from
the same packed latents, 2 steps; the images agree to 1e-3.

Every parameter is perturbed; the guidance-distilled (dev) and plain (schnell) layouts.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from pipeline_cases import PROMPT, make_flux_pipeline

from mobius.testing import build_with_cli

HEIGHT, WIDTH = 32, 24  # latents 16 x 12, packed into 8 x 6 = 48 tokens
MAX_SEQUENCE_LENGTH = 10


@pytest.mark.parametrize("guidance_embeds", [True, False], ids=["dev", "schnell"])
def test_flux_image_matches_diffusers(tmp_path, guidance_embeds):
    import torch

    from mobius_diffusion.pipeline import open_pipeline, pack_latents

    pipe = make_flux_pipeline(tmp_path / "hf", guidance_embeds)
    # --validate: each component against its own library's reading (T5's encoder alone)
    out = build_with_cli(tmp_path / "hf", tmp_path / "onnx", "--validate")
    validation = json.loads((out / "mobius.json").read_text())["validation"]
    assert validation["passed"] and "T5EncoderModel" in validation["reference"]
    for graph in ("transformer/model", "text_encoder/model", "text_encoder_2/model"):
        assert (out / f"{graph}.onnx").is_file(), graph
    assert (out / "tokenizer_2" / "tokenizer.json").is_file()

    noise = np.random.default_rng(1).standard_normal((1, 4, 16, 12)).astype(np.float32)
    latents = pack_latents(noise)
    options = dict(
        num_inference_steps=2,
        guidance_scale=2.5,
        height=HEIGHT,
        width=WIDTH,
        max_sequence_length=MAX_SEQUENCE_LENGTH,
    )
    with torch.no_grad():
        expected = pipe(
            PROMPT, latents=torch.from_numpy(latents), output_type="np", **options
        ).images
    got = open_pipeline(out)(PROMPT, latents=latents, **options)
    assert got.shape == expected.shape == (1, HEIGHT, WIDTH, 3)
    diff = float(np.abs(got - expected).max())
    print("flux", "dev" if guidance_embeds else "schnell", "max abs diff", diff)
    assert diff <= 1e-3
    assert float(expected.std()) > 1e-3, "the image barely depends on anything"
    if guidance_embeds:  # the guidance embedding is fed: another scale, another image
        other = open_pipeline(out)(PROMPT, latents=latents, **{**options, "guidance_scale": 6.0})
        assert float(np.abs(other - got).max()) > 1e-4
