"""UNetSpatioTemporalConditionModel parity (Stable Video Diffusion's denoiser) against diffusers.

Three frames (the temporal convs span three) of a batch of two videos, one image
token each and SVD's three added time ids. The "svd" layout has a cross-attention
down block and a plain one, as SVD's end blocks; "options" takes heads, layers and
transformer depths per block and an odd latent size (upsampled to the skips' sizes).
"""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.unet_spatio_temporal import UNetSpatioTemporalConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

SVD = dict(
    in_channels=8,
    out_channels=4,
    down_block_types=["CrossAttnDownBlockSpatioTemporal", "DownBlockSpatioTemporal"],
    up_block_types=["UpBlockSpatioTemporal", "CrossAttnUpBlockSpatioTemporal"],
    block_out_channels=[32, 64],  # diffusers fixes 32 GroupNorm groups
    layers_per_block=1,
    cross_attention_dim=16,
    num_attention_heads=2,
    addition_time_embed_dim=4,
    projection_class_embeddings_input_dim=3 * 4,
)
CASES = {
    "svd": (SVD, (4, 6)),
    "options": (
        dict(
            SVD,
            down_block_types=["CrossAttnDownBlockSpatioTemporal"] * 2,
            up_block_types=["CrossAttnUpBlockSpatioTemporal"] * 2,
            layers_per_block=[2, 1],
            num_attention_heads=[1, 4],
            transformer_layers_per_block=[2, 1],
        ),
        (5, 3),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_svd_parity(case, tmp_path):
    config, (height, width) = CASES[case]
    rng = np.random.default_rng(0)
    inputs = {
        "sample": rng.standard_normal((2, 3, 8, height, width)).astype(np.float32),
        "timestep": np.array([-0.4, 1.3], np.float32),  # log(sigma) / 4, as SVD's scheduler
        "encoder_hidden_states": rng.standard_normal((2, 1, 16)).astype(np.float32),
        "added_time_ids": np.array([[6, 127, 0.02], [3, 40, 0.5]], np.float32),
    }
    results = check_diffusion_parity(
        "UNetSpatioTemporalConditionModel",
        config,
        {"model": inputs},
        DIFFUSERS_CALLS["UNetSpatioTemporalConditionModel"],
        tmp_path,
    )
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "svd":  # --validate's sample feeds (SVD's time ids and timesteps) pass too
        from mobius.validate import validate_package

        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    "change, named",
    [
        (dict(down_block_types=["DownBlock3D", "DownBlockSpatioTemporal"]), "down_block_types"),
        (dict(block_out_channels=[32, 48]), "GroupNorm groups"),
        (dict(num_attention_heads=[2, 3]), "heads"),
        (dict(cross_attention_dim=[16, 8]), "cross_attention_dim"),
        (dict(transformer_layers_per_block=[[1], 1]), "transformer_layers_per_block"),
        (dict(projection_class_embeddings_input_dim=10), "projection_class_embeddings"),
        (dict(layers_per_block=0), "layers_per_block"),
    ],
)
def test_svd_unet_refuses_what_it_does_not_build(change, named):
    fields = {"_class_name": "UNetSpatioTemporalConditionModel", **SVD, **change}
    with pytest.raises(ConfigError, match=named):
        UNetSpatioTemporalConfig.from_hf(ComponentConfig(fields))
