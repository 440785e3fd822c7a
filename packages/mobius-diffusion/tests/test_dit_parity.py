"""DiT parity against diffusers: learned sigma, affine norms, a latent larger than sample_size."""

from __future__ import annotations

import numpy as np
import pytest

from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

BASE = dict(
    num_attention_heads=2,
    attention_head_dim=8,
    in_channels=4,
    out_channels=8,
    num_layers=2,
    sample_size=8,
    patch_size=2,
    num_embeds_ada_norm=10,
)
CASES = {
    "learned-sigma": (BASE, 8),
    "affine-norm-gelu": (
        dict(BASE, out_channels=None, norm_elementwise_affine=True, activation_fn="gelu"),
        8,
    ),
    # diffusers recomputes the position table for a size other than sample_size
    "larger-latent": (BASE, 12),
}


transformer_output = DIFFUSERS_CALLS["DiTTransformer2DModel"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_dit_parity(case, tmp_path):
    config, size = CASES[case]
    rng = np.random.default_rng(0)
    feed = {  # DiT takes square latents; label 10 is the "no class" row
        "hidden_states": rng.standard_normal((2, 4, size, size)).astype(np.float32),
        "timestep": np.array([10.0, 500.0], np.float32),
        "class_labels": np.array([3, 10], np.int64),
    }
    results = check_diffusion_parity(
        "DiTTransformer2DModel", config, {"model": feed}, transformer_output, tmp_path
    )
    print(case, [(r.ep, r.diffs) for r in results])
