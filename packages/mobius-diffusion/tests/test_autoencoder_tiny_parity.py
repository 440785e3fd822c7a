"""AutoencoderTiny (TAESD) parity: the encoder's latents and the decoder's image against diffusers."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.autoencoder_tiny import AutoencoderTinyConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

# TAESD (madebyollin/taesd) in small: four stages of one width, (1, 3, 3, 3) encoder and
# (3, 3, 3, 1) decoder blocks (fewer here), ReLU, 4 latent channels. f = 8.
TAESD = dict(
    encoder_block_out_channels=[8, 8, 8, 8],
    decoder_block_out_channels=[8, 8, 8, 8],
    num_encoder_blocks=[1, 2, 1, 1],
    num_decoder_blocks=[1, 1, 2, 1],
    latent_channels=4,
)
# TAEF1 (madebyollin/taef1): TAESD's layout with Flux's 16 latent channels; here three stages
# (f = 4), encoder and decoder of different widths, an encoder stage of no blocks.
TAEF1 = dict(
    encoder_block_out_channels=[12, 12, 12],
    decoder_block_out_channels=[16, 16, 16],
    num_encoder_blocks=[1, 0, 2],
    num_decoder_blocks=[2, 1, 1],
    latent_channels=16,
    shift_factor=0.1,
)
CASES = {"taesd-f8": (TAESD, 8), "taef1-f4": (TAEF1, 4)}

vae_reference = DIFFUSERS_CALLS["AutoencoderTiny"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_autoencoder_tiny_parity(case, tmp_path):
    config, factor = CASES[case]
    rng = np.random.default_rng(0)
    sample = rng.uniform(-1, 1, (2, 3, 2 * factor, 3 * factor)).astype(np.float32)
    # latents past TAESD's soft clamp of (-3, 3) too
    latent = 2.5 * rng.standard_normal((2, config["latent_channels"], 2, 3)).astype(np.float32)
    inputs = {"encoder/model": {"sample": sample}, "decoder/model": {"latent_sample": latent}}
    results = check_diffusion_parity("AutoencoderTiny", config, inputs, vae_reference, tmp_path)
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "taesd-f8":  # --validate's sample feeds fit the hub's layout, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"decoder_block_out_channels": [8, 16, 8, 8]}, "decoder_block_out_channels"),
        ({"upsample_fn": "bilinear"}, "upsample_fn 'bilinear'"),
        ({"act_fn": "mish"}, "activation 'mish'"),
        ({"num_encoder_blocks": [1, 2]}, "num_encoder_blocks must list 4 integers"),
        ({"latent_channels": 0}, "latent_channels must be a positive integer"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "AutoencoderTiny", **TAESD, **change}
    with pytest.raises(ConfigError, match=named):
        AutoencoderTinyConfig.from_hf(ComponentConfig(fields))
