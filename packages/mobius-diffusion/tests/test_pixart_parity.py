"""PixArt parity against diffusers: caption padding mask, with and without size conditioning."""

from __future__ import annotations

import numpy as np
import pytest

from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

BASE = dict(
    num_attention_heads=2,
    attention_head_dim=12,
    in_channels=4,
    out_channels=8,
    num_layers=2,
    cross_attention_dim=24,
    sample_size=8,
    patch_size=2,
    caption_channels=16,
)
CASES = {
    "sigma": dict(BASE, use_additional_conditions=False),
    "alpha-size-conditioned": dict(
        BASE, use_additional_conditions=True, interpolation_scale=2, norm_elementwise_affine=True
    ),
}


transformer_output = DIFFUSERS_CALLS["PixArtTransformer2DModel"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_pixart_parity(case, tmp_path):
    config = CASES[case]
    rng = np.random.default_rng(0)
    mask = np.ones((2, 6), np.int64)
    mask[1, 4:] = 0  # the second prompt is shorter: its last two tokens are padding
    feed = {  # a 8x12 latent: a 4x6 patch grid, other than sample_size
        "hidden_states": rng.standard_normal((2, 4, 8, 12)).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 6, 16)).astype(np.float32),
        "encoder_attention_mask": mask,
        "timestep": np.array([10.0, 500.0], np.float32),
    }
    if config["use_additional_conditions"]:
        feed["resolution"] = np.array([[64, 96], [96, 64]], np.float32)
        feed["aspect_ratio"] = np.array([[0.667], [1.5]], np.float32)
    results = check_diffusion_parity(
        "PixArtTransformer2DModel", config, {"model": feed}, transformer_output, tmp_path
    )
    print(case, [(r.ep, r.diffs) for r in results])
