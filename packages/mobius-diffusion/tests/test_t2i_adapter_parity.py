"""T2I-Adapter parity: every feature map against diffusers, full and XL layouts."""

from __future__ import annotations

import numpy as np
import pytest

from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

CASES = {
    "full-adapter": dict(
        in_channels=3,
        channels=[8, 16, 16],
        num_res_blocks=2,
        downscale_factor=4,
        adapter_type="full_adapter",
    ),
    "full-adapter-xl": dict(
        in_channels=3,
        channels=[8, 16, 24, 24],
        num_res_blocks=1,
        downscale_factor=4,
        adapter_type="full_adapter_xl",
    ),
}


adapter_features = DIFFUSERS_CALLS["T2IAdapter"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_t2i_adapter_parity(case, tmp_path):
    condition = np.random.default_rng(0).standard_normal((2, 3, 32, 48)).astype(np.float32)
    results = check_diffusion_parity(
        "T2IAdapter", CASES[case], {"model": {"condition": condition}}, adapter_features, tmp_path
    )
    print(case, [(r.ep, r.diffs) for r in results])
