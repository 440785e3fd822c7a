"""SD3 / SD3.5 transformer parity against diffusers: stored and computed position tables, QK norm, dual attention."""

from __future__ import annotations

import numpy as np
import pytest

from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

BASE = dict(
    sample_size=16,
    patch_size=2,
    in_channels=4,
    num_layers=2,
    attention_head_dim=8,
    num_attention_heads=2,
    joint_attention_dim=12,
    caption_projection_dim=16,
    pooled_projection_dim=10,
    out_channels=4,
    pos_embed_max_size=12,
)
CASES = {
    "sd3": BASE,
    "sd35": dict(BASE, num_layers=3, qk_norm="rms_norm", dual_attention_layers=[0, 1]),
    "computed-pos-embed": dict(BASE, pos_embed_max_size=None),
}


transformer_output = DIFFUSERS_CALLS["SD3Transformer2DModel"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_sd3_parity(case, tmp_path):
    rng = np.random.default_rng(0)
    feed = {  # a 12x16 latent: a 6x8 patch grid, cropped off-centre from the 12x12 table
        "hidden_states": rng.standard_normal((2, 4, 12, 16)).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 5, 12)).astype(np.float32),
        "pooled_projections": rng.standard_normal((2, 10)).astype(np.float32),
        "timestep": np.array([250.0, 800.0], np.float32),
    }
    results = check_diffusion_parity(
        "SD3Transformer2DModel", CASES[case], {"model": feed}, transformer_output, tmp_path
    )
    print(case, [(r.ep, r.diffs) for r in results])
