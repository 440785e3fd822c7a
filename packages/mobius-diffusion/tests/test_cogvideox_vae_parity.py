"""AutoencoderKLCogVideoX parity: latent moments and decoded video against diffusers.

Frame counts cover diffusers' frame batching: the encoder cuts a clip into chunks
of 8 frames (the remainder joins the first), the decoder cuts latents into chunks
of 2; 17 frames and 5 latent frames take two chunks each, so the conv caches and
the per-chunk GroupNorm statistics are exercised.
"""

from __future__ import annotations

import numpy as np
import pytest

from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

BASE = dict(
    in_channels=3,
    out_channels=3,
    down_block_types=["CogVideoXDownBlock3D"] * 3,
    up_block_types=["CogVideoXUpBlock3D"] * 3,
    block_out_channels=[8, 16, 16],
    latent_channels=4,
    layers_per_block=1,
    norm_num_groups=4,
    temporal_compression_ratio=4,
)
CASES = {
    # (config, sample frames, latent frames)
    "one-chunk": (BASE, 9, 3),
    "two-chunks": (BASE, 17, 5),
    "even-chunks": (dict(BASE, norm_eps=1e-5), 16, 4),
    "single-frame": (BASE, 1, 1),
    "quant-convs": (
        dict(BASE, out_channels=4, in_channels=4, use_quant_conv=True, use_post_quant_conv=True),
        5,
        2,
    ),
}


vae_reference = DIFFUSERS_CALLS["AutoencoderKLCogVideoX"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_cogvideox_vae_parity(case, tmp_path):
    config, frames, latent_frames = CASES[case]
    rng = np.random.default_rng(0)
    channels = config["in_channels"]
    sample = rng.standard_normal((2, channels, frames, 16, 16)).astype(np.float32)
    latent = rng.standard_normal((2, 4, latent_frames, 4, 4)).astype(np.float32)
    inputs = {"encoder/model": {"sample": sample}, "decoder/model": {"latent_sample": latent}}
    results = check_diffusion_parity(
        "AutoencoderKLCogVideoX", config, inputs, vae_reference, tmp_path
    )
    print(case, [(r.ep, r.diffs) for r in results])
