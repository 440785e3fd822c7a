"""AutoencoderKLLTXVideo parity: LTX-Video 0.9.0's layout, and 0.9.5's encoder with 0.9.1+'s
decoder (decode timestep, injected noise, residual upsampling that halves the channels).

The decoder's ``noise.{i}`` inputs stand for diffusers' ``torch.randn`` draws (the
reference call hands them out in order); ``latents/model`` gives the checkpoint's
latent statistics.
"""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.autoencoder_kl_ltx import AutoencoderKLLTXVideoConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

V090 = dict(  # Lightricks/LTX-Video 0.9.0's vae/config.json, scaled down
    in_channels=3,
    out_channels=3,
    latent_channels=4,
    block_out_channels=(8, 16),
    down_block_types=("LTXVideoDownBlock3D",) * 2,
    decoder_block_out_channels=(8, 16),
    layers_per_block=(1, 1, 1),
    decoder_layers_per_block=(1, 1, 1),
    spatio_temporal_scaling=(True, False),
    decoder_spatio_temporal_scaling=(True, False),
    decoder_inject_noise=(False, False, False),
    downsample_type=("conv", "conv"),
    upsample_residual=(False, False),
    upsample_factor=(1, 1),
    timestep_conditioning=False,
    patch_size=2,
    patch_size_t=1,
    encoder_causal=True,
    decoder_causal=False,
)
V095 = dict(  # 0.9.5's encoder (depth-folding down blocks), 0.9.1+'s decoder
    V090,
    block_out_channels=(8, 16, 16, 32),
    down_block_types=("LTXVideo095DownBlock3D",) * 3,
    layers_per_block=(1, 1, 1, 1),
    spatio_temporal_scaling=(True, True, True),
    downsample_type=("spatial", "temporal", "spatiotemporal"),
    decoder_block_out_channels=(8, 16),
    decoder_spatio_temporal_scaling=(True, True),
    decoder_inject_noise=(False, True, True),
    upsample_residual=(True, True),
    upsample_factor=(2, 2),
    timestep_conditioning=True,
    resnet_norm_eps=1e-5,
)
CASES = {
    # (config, sample frames x rows x columns, latent frames x rows x columns)
    "0.9.0": (V090, (5, 16, 12), (3, 4, 3)),
    "0.9.5": (V095, (5, 16, 24), (2, 2, 3)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_ltx_vae_parity(case, tmp_path):
    config, video, latent = CASES[case]
    rng = np.random.default_rng(0)
    decoder = {"latent_sample": rng.standard_normal((2, 4, *latent)).astype(np.float32)}
    if config["timestep_conditioning"]:
        decoder["timestep"] = np.array([0.05, 0.3], np.float32)
        rows, columns = latent[1:]
        # the mid block's resnet draws twice at the latent's size, the first up block's after
        # its doubling
        for i, scale in enumerate((1, 1, 2, 2)):
            noise = rng.standard_normal((rows * scale, columns * scale)).astype(np.float32)
            decoder[f"noise.{i}"] = noise
    inputs = {
        "encoder/model": {"sample": rng.standard_normal((2, 3, *video)).astype(np.float32)},
        "decoder/model": decoder,
        "latents/model": {},
    }
    results = check_diffusion_parity(
        "AutoencoderKLLTXVideo", config, inputs, DIFFUSERS_CALLS["AutoencoderKLLTXVideo"], tmp_path
    )
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "0.9.5":  # --validate's sample feeds fit the layout, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"patch_size_t": 2}, "patch_size_t"),
        ({"downsample_type": ("conv", "pixel")}, "downsample_type 'pixel'"),
        ({"down_block_types": ("LTXVideoDownBlock3D", "Other")}, "down_block_types 'Other'"),
        ({"decoder_inject_noise": (False, False)}, "decoder_inject_noise must list 3"),
        ({"timestep_conditioning": 1}, "timestep_conditioning must be true or false"),
        ({"timestep_conditioning": True}, "up block 1 changes channels"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "AutoencoderKLLTXVideo", **V090, **change}
    with pytest.raises(ConfigError, match=named):
        AutoencoderKLLTXVideoConfig.from_hf(ComponentConfig(fields))
