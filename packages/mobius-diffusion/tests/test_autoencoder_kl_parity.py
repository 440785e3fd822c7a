"""AutoencoderKL parity: the encoder's latent moments and the decoder's image against diffusers."""

from __future__ import annotations

import numpy as np
import pytest

from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

BASE = dict(
    in_channels=3,
    out_channels=3,
    down_block_types=["DownEncoderBlock2D"] * 3,
    up_block_types=["UpDecoderBlock2D"] * 3,
    block_out_channels=[8, 16, 16],
    layers_per_block=1,
    latent_channels=4,
    norm_num_groups=4,
)
CASES = {
    "sd": BASE,
    "two-layers": dict(
        BASE,
        block_out_channels=[8, 16],
        layers_per_block=2,
        down_block_types=["DownEncoderBlock2D"] * 2,
        up_block_types=["UpDecoderBlock2D"] * 2,
    ),
    "no-quant-no-mid-attention": dict(
        BASE, use_quant_conv=False, use_post_quant_conv=False, mid_block_add_attention=False
    ),
}


vae_reference = DIFFUSERS_CALLS["AutoencoderKL"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_autoencoder_kl_parity(case, tmp_path):
    rng = np.random.default_rng(0)
    sample = rng.standard_normal((2, 3, 20, 24)).astype(np.float32)
    latent = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    inputs = {"encoder/model": {"sample": sample}, "decoder/model": {"latent_sample": latent}}
    results = check_diffusion_parity("AutoencoderKL", CASES[case], inputs, vae_reference, tmp_path)
    print(case, [(r.ep, r.diffs) for r in results])


def test_deprecated_attention_names_are_renamed():
    """Checkpoints older than diffusers 0.14 name the mid-block attention ``query``/``proj_attn``."""
    from mobius_diffusion.config import ComponentConfig
    from mobius_diffusion.models.autoencoder_kl import AutoencoderKL, AutoencoderKLConfig

    config = AutoencoderKLConfig.from_hf(ComponentConfig({"_class_name": "AutoencoderKL", **BASE}))
    old = {
        "encoder.mid_block.attentions.0.query.weight": 1,
        "decoder.mid_block.attentions.0.proj_attn.bias": 2,
        "encoder.mid_block.attentions.0.group_norm.weight": 3,
        "decoder.up_blocks.0.resnets.0.conv1.weight": 4,
    }
    assert AutoencoderKL(config).sanitize(old) == {
        "encoder.mid_block.attentions.0.to_q.weight": 1,
        "decoder.mid_block.attentions.0.to_out.0.bias": 2,
        "encoder.mid_block.attentions.0.group_norm.weight": 3,
        "decoder.up_blocks.0.resnets.0.conv1.weight": 4,
    }
