"""AutoencoderKLFlux2 against diffusers: encoder moments, decoded image, latent statistics."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.autoencoder_kl_flux2 import AutoencoderKLFlux2Config
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

BASE = dict(
    in_channels=3,
    out_channels=3,
    down_block_types=["DownEncoderBlock2D"] * 2,
    up_block_types=["UpDecoderBlock2D"] * 2,
    block_out_channels=[8, 16],
    layers_per_block=1,
    latent_channels=4,
    norm_num_groups=4,
    patch_size=[2, 2],
    batch_norm_eps=1e-4,
)
CASES = {
    # FLUX.2's layout (config.json as the hub holds it, scaled down)
    "flux2": BASE,
    # a decoder of its own widths, no quant convs, no mid-block attention
    "decoder-widths": dict(
        BASE,
        decoder_block_out_channels=[12, 8],
        use_quant_conv=False,
        use_post_quant_conv=False,
        mid_block_add_attention=False,
    ),
}

vae_reference = DIFFUSERS_CALLS["AutoencoderKLFlux2"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_flux2_vae_parity(case, tmp_path):
    rng = np.random.default_rng(0)
    inputs = {
        "encoder/model": {"sample": rng.standard_normal((2, 3, 16, 20)).astype(np.float32)},
        "decoder/model": {"latent_sample": rng.standard_normal((2, 4, 8, 10)).astype(np.float32)},
        "bn/model": {},
    }
    results = check_diffusion_parity(
        "AutoencoderKLFlux2", CASES[case], inputs, vae_reference, tmp_path
    )
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "flux2":  # --validate's sample feeds fit the hub's layout, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"decoder_block_out_channels": [8]}, "decoder_block_out_channels must list 2"),
        ({"patch_size": [2, 2, 1]}, "patch_size must list 2"),
        ({"batch_norm_eps": -1.0}, "batch_norm_eps must be a positive number"),
        ({"up_block_types": ["UpDecoderBlock2D", "AttnUpDecoderBlock2D"]}, "up_block_types"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "AutoencoderKLFlux2", **BASE, **change}
    with pytest.raises(ConfigError, match=named):
        AutoencoderKLFlux2Config.from_hf(ComponentConfig(fields))
