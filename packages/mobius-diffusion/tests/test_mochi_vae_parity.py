"""AutoencoderKLMochi against diffusers: Fourier features, replicate-padded causal convs,
per-frame GroupNorms, the encoder's causal frame attention, the decoder's depth to space and
its dropped first frames."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.autoencoder_kl_mochi import AutoencoderKLMochiConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

BASE = dict(  # the hub's layout, narrow: three down blocks of (1, 2, 3) frames and 2 pixels
    in_channels=15,
    out_channels=3,
    encoder_block_out_channels=[32, 32, 32, 64],
    decoder_block_out_channels=[32, 32, 32, 64],
    latent_channels=4,
    layers_per_block=[1, 1, 1, 1, 1],
    temporal_expansions=[1, 2, 3],
    spatial_expansions=[2, 2, 2],
    add_attention_block=[False, True, True, True, True],
)
CASES = {
    # (config, video frames, latent frames): 13 frames = 1 + 2 x 6 -> 3 latent frames
    "mochi": (BASE, 13, 3),
    # one frame (the attention over one frame is its values), attention only at the ends
    "one-frame": (dict(BASE, add_attention_block=[True, False, False, False, True]), 1, 1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_mochi_vae_parity(case, tmp_path):
    config, frames, latent_frames = CASES[case]
    rng = np.random.default_rng(0)
    feeds = {
        "encoder/model": {"sample": rng.uniform(-1, 1, (2, 3, frames, 16, 24)).astype(np.float32)},
        "decoder/model": {
            "latent_sample": rng.standard_normal((2, 4, latent_frames, 2, 3)).astype(np.float32)
        },
    }
    results = check_diffusion_parity(
        "AutoencoderKLMochi", config, feeds, DIFFUSERS_CALLS["AutoencoderKLMochi"], tmp_path
    )
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "mochi":  # --validate's sample feeds fit the layout, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"in_channels": 16}, "in_channels"),
        ({"encoder_block_out_channels": [32, 32, 32, 48]}, "multiples of 32"),
        ({"layers_per_block": [1, 1, 1, 1]}, "layers_per_block"),
        ({"temporal_expansions": [1, 2]}, "temporal_expansions"),
        ({"decoder_block_out_channels": [32, 64, 64]}, "decoder_block_out_channels"),
        ({"add_attention_block": [True] * 4}, "add_attention_block"),
        ({"act_fn": "gelu-tanh"}, "activation"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "AutoencoderKLMochi", **BASE, **change}
    with pytest.raises(ConfigError, match=named):
        AutoencoderKLMochiConfig.from_hf(ComponentConfig(fields))
