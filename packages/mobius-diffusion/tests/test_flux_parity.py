"""Flux transformer parity against diffusers, with and without guidance embedding."""

from __future__ import annotations

import numpy as np
import pytest

from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

BASE = dict(
    patch_size=1,
    in_channels=8,
    num_layers=2,
    num_single_layers=2,
    attention_head_dim=16,
    num_attention_heads=2,
    joint_attention_dim=12,
    pooled_projection_dim=10,
    axes_dims_rope=[4, 6, 6],
)
CASES = {"schnell": dict(BASE, guidance_embeds=False), "dev": dict(BASE, guidance_embeds=True)}


def flux_inputs(guidance: bool) -> dict[str, np.ndarray]:
    """Packed latents of a 4x6 grid and a 5-token prompt, with the pipeline's position ids."""
    rng = np.random.default_rng(0)
    rows, cols = np.meshgrid(np.arange(4), np.arange(6), indexing="ij")
    img_ids = np.stack([np.zeros(24), rows.ravel(), cols.ravel()], axis=1).astype(np.float32)
    feed = {
        "hidden_states": rng.standard_normal((2, 24, 8)).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 5, 12)).astype(np.float32),
        "pooled_projections": rng.standard_normal((2, 10)).astype(np.float32),
        "timestep": np.array([0.25, 0.8], np.float32),
        "img_ids": img_ids,
        # Flux pipelines pass zeros; distinct ids exercise the text rotation too.
        "txt_ids": rng.integers(0, 4, (5, 3)).astype(np.float32),
    }
    if guidance:
        feed["guidance"] = np.array([3.5, 1.0], np.float32)
    return feed


transformer_output = DIFFUSERS_CALLS["FluxTransformer2DModel"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_flux_parity(case, tmp_path):
    config = CASES[case]
    feed = flux_inputs(config["guidance_embeds"])
    results = check_diffusion_parity(
        "FluxTransformer2DModel", config, {"model": feed}, transformer_output, tmp_path
    )
    print(case, [(r.ep, r.diffs) for r in results])
