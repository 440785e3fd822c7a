"""AutoencoderKLHunyuanVideo parity: latent moments and decoded video against diffusers.

Three blocks with a spatial ratio of 4: the first two halve space and time, the last
neither (the hub's layout, in small). 9 frames (3 latent frames) exercise the
causal padding, the strided time convs, the first frame's own upsampling and the
frame-causal mid-block attention; a single frame has no time to compress. Clips stay
under diffusers' 16-frame (4 latent frames) tiling threshold: the graphs are one pass.
"""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.autoencoder_kl_hunyuan_video import (
    AutoencoderKLHunyuanVideoConfig,
)
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

BASE = dict(
    in_channels=3,
    out_channels=3,
    latent_channels=4,
    down_block_types=["HunyuanVideoDownBlock3D"] * 3,
    up_block_types=["HunyuanVideoUpBlock3D"] * 3,
    block_out_channels=[8, 16, 16],
    layers_per_block=1,
    norm_num_groups=4,
    spatial_compression_ratio=4,
    temporal_compression_ratio=4,
)
CASES = {
    # (config, sample frames, latent frames)
    "nine-frames": (BASE, 9, 3),
    # one frame: nothing to compress in time; no mid-block attention, two resnets per block
    "single-frame": (dict(BASE, mid_block_add_attention=False, layers_per_block=2), 1, 1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hunyuan_video_vae_parity(case, tmp_path):
    config, frames, latent_frames = CASES[case]
    rng = np.random.default_rng(0)
    sample = rng.standard_normal((2, 3, frames, 8, 12)).astype(np.float32)
    latent = rng.standard_normal((2, 4, latent_frames, 2, 3)).astype(np.float32)
    inputs = {"encoder/model": {"sample": sample}, "decoder/model": {"latent_sample": latent}}
    results = check_diffusion_parity(
        "AutoencoderKLHunyuanVideo",
        config,
        inputs,
        DIFFUSERS_CALLS["AutoencoderKLHunyuanVideo"],
        tmp_path,
    )
    print(case, [(r.ep, r.diffs) for r in results])


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"temporal_compression_ratio": 8}, "temporal_compression_ratio"),
        ({"spatial_compression_ratio": 6}, "spatial_compression_ratio"),
        ({"up_block_types": ["UpDecoderBlock2D"] * 3}, "up_block_types"),
        ({"norm_num_groups": 3}, "norm_num_groups"),
        ({"act_fn": "mish"}, "mish"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "AutoencoderKLHunyuanVideo", **BASE, **change}
    with pytest.raises(ConfigError, match=named):
        AutoencoderKLHunyuanVideoConfig.from_hf(ComponentConfig(fields))
