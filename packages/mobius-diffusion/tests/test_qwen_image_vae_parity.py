"""AutoencoderKLQwenImage parity: latent moments and decoded frames against diffusers.

Qwen-Image's VAE is built by Wan's (same modules and keys); what is its own is the
config (``input_channels``, here 4 so that a mix-up with Wan's ``in_channels``
default of 3 fails). 5 frames take the first-frame pass and one chunk of 4; 2 latent
frames take two decoder passes, so the temporal down- and upsample's first-frame
rules are exercised as well as the single image the pipeline encodes.
"""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius_diffusion.models.autoencoder_kl_qwenimage import AutoencoderKLQwenImageConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

CONFIG = dict(
    base_dim=8,
    z_dim=4,
    dim_mult=[1, 2, 2],
    num_res_blocks=1,
    temperal_downsample=[False, True],
    input_channels=4,
    latents_mean=[0.0] * 4,
    latents_std=[1.0] * 4,
)


def test_qwen_image_vae_parity(tmp_path):
    rng = np.random.default_rng(0)
    sample = rng.standard_normal((2, 4, 5, 8, 12)).astype(np.float32)
    latent = rng.standard_normal((2, 4, 2, 2, 3)).astype(np.float32)
    inputs = {"encoder/model": {"sample": sample}, "decoder/model": {"latent_sample": latent}}
    results = check_diffusion_parity(
        "AutoencoderKLQwenImage",
        CONFIG,
        inputs,
        DIFFUSERS_CALLS["AutoencoderKLQwenImage"],
        tmp_path,
    )
    print([(r.ep, r.diffs) for r in results])


class _Fields:
    def __init__(self, **fields):
        self.__dict__.update(fields)


@pytest.mark.parametrize(
    "change, named",
    [
        (dict(input_channels=0), "input_channels"),
        (dict(input_channels="3"), "input_channels"),
        (dict(temperal_downsample=[True]), "temperal_downsample"),
        (dict(attn_scales=[1.0]), "attn_scales"),
    ],
)
def test_qwen_image_vae_refuses_what_it_does_not_build(change, named):
    with pytest.raises(ConfigError, match=named):
        AutoencoderKLQwenImageConfig.from_hf(_Fields(**dict(CONFIG, **change)))
