"""AutoencoderKLTemporalDecoder parity (Stable Video Diffusion's VAE) against diffusers.

Two videos of three frames (the temporal convs span three): the encoder's moments
of every frame, and the decoder's frames of each video decoded together, as
diffusers' ``decode(z, num_frames)``.
"""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.autoencoder_kl_temporal_decoder import (
    AutoencoderKLTemporalDecoderConfig,
)
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

CONFIG = dict(
    down_block_types=["DownEncoderBlock2D"] * 2,
    block_out_channels=[32, 64],  # diffusers fixes 32 GroupNorm groups
    layers_per_block=2,
    latent_channels=4,
)


def test_svd_vae_parity(tmp_path):
    rng = np.random.default_rng(0)
    inputs = {
        "encoder/model": {"sample": rng.standard_normal((2, 3, 3, 8, 12)).astype(np.float32)},
        "decoder/model": {"latent_sample": rng.standard_normal((2, 4, 3, 4, 6)).astype(np.float32)},
    }
    results = check_diffusion_parity(
        "AutoencoderKLTemporalDecoder",
        CONFIG,
        inputs,
        DIFFUSERS_CALLS["AutoencoderKLTemporalDecoder"],
        tmp_path,
    )
    print([(r.ep, r.diffs) for r in results])
    from mobius.validate import validate_package  # --validate's sample videos pass too

    report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
    assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    "change, named",
    [
        (dict(layers_per_block=1), "layers_per_block 1"),
        (dict(block_out_channels=[32, 48]), "32 groups"),
        (dict(down_block_types=["DownEncoderBlock2D", "AttnDownEncoderBlock2D"]), "down_block"),
        (dict(latent_channels=0), "latent_channels"),
    ],
)
def test_svd_vae_refuses_what_it_does_not_build(change, named):
    fields = {"_class_name": "AutoencoderKLTemporalDecoder", **CONFIG, **change}
    with pytest.raises(ConfigError, match=named):
        AutoencoderKLTemporalDecoderConfig.from_hf(ComponentConfig(fields))
