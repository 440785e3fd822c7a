"""AutoencoderKLWan parity: latent moments and decoded video against diffusers.

diffusers encodes the first frame, then chunks of 4 (the frames after the last
whole chunk are dropped) and decodes one latent frame at a time with conv caches:
7 frames take two chunks and drop two; 3 latent frames take three decoder
passes, so the caches and the first-frame rules of the temporal down- and
upsamples are exercised. A one-frame clip and latent (an image) take one pass
(and a VAE with one temporal downsample, a decoder width of its own). Wan 2.2's
layout adds the residual down/up blocks' shortcuts and 2x2 patching.
"""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius_diffusion.models.autoencoder_kl_wan import AutoencoderKLWanConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

BASE = dict(
    base_dim=8,
    z_dim=4,
    dim_mult=[1, 2, 2],
    num_res_blocks=1,
    temperal_downsample=[True, True],
)
WAN22 = dict(BASE, is_residual=True, patch_size=2, in_channels=12, out_channels=12)
CASES = {
    # (config, sample frames, latent frames, pixels per latent side)
    "wan2.1": (BASE, 7, 3, 4),
    "image": (dict(BASE, temperal_downsample=[False, True], decoder_base_dim=4), 1, 1, 4),
    "wan2.2": (dict(WAN22, decoder_base_dim=12), 5, 2, 8),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_autoencoder_kl_wan_parity(case, tmp_path):
    config, frames, latent_frames, scale = CASES[case]
    rng = np.random.default_rng(0)
    sample = rng.standard_normal((2, 3, frames, 2 * scale, 3 * scale)).astype(np.float32)
    latent = rng.standard_normal((2, 4, latent_frames, 2, 3)).astype(np.float32)
    inputs = {"encoder/model": {"sample": sample}, "decoder/model": {"latent_sample": latent}}
    results = check_diffusion_parity(
        "AutoencoderKLWan", config, inputs, DIFFUSERS_CALLS["AutoencoderKLWan"], tmp_path
    )
    print(case, [(r.ep, r.diffs) for r in results])


class _Fields:
    def __init__(self, **fields):
        self.__dict__.update(fields)


@pytest.mark.parametrize(
    "change, named",
    [
        (dict(is_residual=1), "is_residual"),
        (dict(patch_size=2), "patch_size"),
        (dict(temperal_downsample=[True]), "temperal_downsample"),
        (dict(temperal_downsample=[1, 0]), "temperal_downsample"),
        (dict(dim_mult=[1, 2, 2, 2], temperal_downsample=[True] * 3), "temporal downsamples"),
        (dict(base_dim=0), "base_dim"),
        (dict(attn_scales=[1.0]), "attn_scales"),
    ],
)
def test_autoencoder_kl_wan_refuses_what_it_does_not_build(change, named):
    with pytest.raises(ConfigError, match=named):
        AutoencoderKLWanConfig.from_hf(_Fields(**dict(BASE, **change)))
