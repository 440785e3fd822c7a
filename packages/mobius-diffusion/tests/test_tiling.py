"""Tiled VAE decoding against diffusers' ``enable_tiling()``: the same tiles, blends and crops.

Each VAE is a tiny random one (every parameter perturbed) built with the CLI; its
decoder graph is run tile by tile by :func:`decode_tiled` and compared with diffusers'
tiled decode of the same latents, over a grid of several tiles each way with a partial
last tile. The whole-image decode differs near the seams, so a tiled result equal to it
would prove nothing: each test also checks that the two differ. Wan's tiles are decoded
frame by frame with ``decoder_step/model``, as the runners and diffusers decode them.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_autoencoder_kl_wan_parity import step_decoder

from mobius.errors import ConfigError
from mobius.testing import build_with_cli
from mobius_diffusion.testing._parity import make_random_diffusers_model
from mobius_diffusion.tiling import TilePlan, _stride_axis, decode_tiled, tile_plan

KL = dict(
    block_out_channels=[8, 16],
    down_block_types=["DownEncoderBlock2D"] * 2,
    up_block_types=["UpDecoderBlock2D"] * 2,
    layers_per_block=1,
    latent_channels=4,
    norm_num_groups=4,
    sample_size=16,  # tiles of 8 latents every 6, blended over 4 pixels
)
COGVIDEOX = dict(
    block_out_channels=[8, 16],
    down_block_types=["CogVideoXDownBlock3D"] * 2,
    up_block_types=["CogVideoXUpBlock3D"] * 2,
    latent_channels=4,
    layers_per_block=1,
    norm_num_groups=4,
    temporal_compression_ratio=4,
    # tiles of 48 x 40 pixels: 24 latents every 20 (rows), 20 every 16 (columns); sizes whose
    # rounded strides and kept rows agree, as the defaults' do (others change diffusers' size)
    sample_height=96,
    sample_width=80,
)
WAN = dict(base_dim=8, z_dim=4, dim_mult=[1, 2, 2], num_res_blocks=1, scale_factor_spatial=4)
#: (class, config, latents shape); Wan tiles 64 pixels every 48 here (diffusers' 256/192 scaled).
CASES = {
    "kl": ("AutoencoderKL", KL, (1, 4, 20, 15)),
    "cogvideox": ("AutoencoderKLCogVideoX", COGVIDEOX, (1, 4, 2, 30, 25)),
    "wan": ("AutoencoderKLWan", dict(WAN, temperal_downsample=[False, True]), (1, 4, 3, 36, 20)),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def built_vae(request, tmp_path_factory):
    """(case, diffusers VAE, decode) for one tiny random VAE built with the CLI; ``decode``
    runs its decoder graph as the runners do (Wan's frame by frame)."""
    import onnxruntime as ort

    class_name, config, _ = CASES[request.param]
    root = tmp_path_factory.mktemp(request.param)
    vae = make_random_diffusers_model(class_name, config)
    vae.save_pretrained(root / "hf", safe_serialization=True)
    out = build_with_cli(root / "hf", root / "onnx")
    if class_name == "AutoencoderKLWan":
        return request.param, vae, step_decoder(out)
    session = ort.InferenceSession(
        str(out / "decoder" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    return request.param, vae, lambda tile: session.run(["sample"], {"latent_sample": tile})[0]


def test_tiled_decode_matches_diffusers(built_vae):
    """Measured: at most ~2e-6 apart (kl, cogvideox, wan)."""
    import torch

    case, vae, decode = built_vae
    class_name, config, shape = CASES[case]
    latents = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    plan = tile_plan({"_class_name": class_name, **config})
    if case == "wan":  # 64-pixel tiles every 48, as diffusers' enable_tiling(64, 64, 48, 48)
        axis = _stride_axis(64, 48, 4)
        plan = TilePlan(axis, axis, 4)
        vae.enable_tiling(64, 64, 48, 48)
        # diffusers' Wan blends its tiles before its final clamp to [-1, 1]; mobius's decoder
        # graph clamps (as diffusers' decode() does), so it blends clamped tiles. The two agree
        # wherever no tile saturates in a blend band; this tiny random VAE saturates
        # everywhere (measured: up to 0.25 apart at the seams), so diffusers' decoder is
        # made to clamp each tile here: what is compared is the tiling itself.
        decoder = vae.decoder
        decoder_forward = decoder.forward
        decoder.forward = lambda *a, **k: decoder_forward(*a, **k).clamp(-1, 1)
    else:
        vae.enable_tiling()
    assert plan.applies(latents)
    got = decode_tiled(decode, latents, plan)
    with torch.no_grad():
        expected = vae.decode(torch.from_numpy(latents)).sample.numpy()
    assert got.shape == expected.shape
    diff = float(np.abs(got - expected).max())
    print(case, "max abs diff", diff)
    assert diff <= 1e-4 * max(1.0, float(np.abs(expected).max()))
    whole = decode(latents)
    assert float(np.abs(whole - got).max()) > 1e-3, "tiling changed nothing: no seam was blended"


def test_tile_plans_are_diffusers_defaults():
    """The tile sizes read from each config are those diffusers' enable_tiling() sets up."""
    import diffusers

    for class_name, config in (
        ("AutoencoderKL", dict(KL, sample_size=512)),
        ("AutoencoderKLCogVideoX", dict(COGVIDEOX, sample_height=480, sample_width=720)),
        ("AutoencoderKLWan", dict(WAN, scale_factor_spatial=8)),
        ("AutoencoderKLQwenImage", dict(base_dim=8, z_dim=4, dim_mult=[1, 2, 2, 2])),
    ):
        vae = getattr(diffusers, class_name).from_config(config)
        plan = tile_plan({"_class_name": class_name, **config})
        if class_name == "AutoencoderKL":
            assert plan.rows.tile == vae.tile_latent_min_size
            assert plan.rows.keep + plan.rows.blend == vae.tile_sample_min_size
        elif class_name == "AutoencoderKLCogVideoX":
            assert (plan.rows.tile, plan.cols.tile) == (
                vae.tile_latent_min_height,
                vae.tile_latent_min_width,
            )
            assert plan.cols.keep + plan.cols.blend == vae.tile_sample_min_width
        else:
            factor = vae.spatial_compression_ratio
            assert plan.factor == factor
            assert plan.rows.tile == vae.tile_sample_min_height // factor
            assert plan.cols.stride == vae.tile_sample_stride_width // factor
            assert plan.rows.keep == vae.tile_sample_stride_height


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"_class_name": "AutoencoderDC"}, "no tiled decode for a AutoencoderDC"),
        ({"_class_name": "AutoencoderKLWan", "patch_size": 2}, "patchified AutoencoderKLWan"),
        (
            {"_class_name": "AutoencoderKL", "block_out_channels": [8], "sample_size": "512"},
            "sample_size",
        ),
    ],
)
def test_untiled_vaes_are_refused_by_name(config, named):
    with pytest.raises(ConfigError, match=named):
        tile_plan(config)
