"""AutoencoderDC parity: the encoder's latent and the decoder's image against diffusers."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.autoencoder_dc import AutoencoderDCConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

# Sana's DC-AE (dc-ae-f32c32-sana-1.0) in small: ResBlocks then EfficientViT blocks with a
# 5x5 multi-scale projection, stride-2 convs down, nearest 2x and conv up, RMS norms. f = 4.
SANA = dict(
    in_channels=3,
    latent_channels=4,
    attention_head_dim=4,
    encoder_block_types=["ResBlock", "EfficientViTBlock", "EfficientViTBlock"],
    decoder_block_types=["ResBlock", "EfficientViTBlock", "EfficientViTBlock"],
    encoder_block_out_channels=[8, 16, 16],
    decoder_block_out_channels=[8, 16, 16],
    encoder_layers_per_block=[1, 1, 1],
    decoder_layers_per_block=[1, 1, 2],
    encoder_qkv_multiscales=[[], [5], [5]],
    decoder_qkv_multiscales=[[], [5], [5]],
    downsample_block_type="Conv",
    upsample_block_type="interpolate",
    decoder_norm_types="rms_norm",
    decoder_act_fns="silu",
)
# The in/mix layout (dc-ae-f32c32-in-1.0): no first stage (its conv is the first
# downsampling), pixel (un)shuffles, BatchNorm and ReLU in the decoder's first stages,
# no multi-scale projection; 6 latent pixels <= the head width take diffusers' quadratic
# form of the attention. Without the encoder's output shortcut. f = 8.
IN_MIX = dict(
    in_channels=3,
    latent_channels=4,
    attention_head_dim=8,
    encoder_block_types=["ResBlock", "ResBlock", "EfficientViTBlock", "EfficientViTBlock"],
    decoder_block_types=["ResBlock", "ResBlock", "EfficientViTBlock", "EfficientViTBlock"],
    encoder_block_out_channels=[8, 8, 16, 16],
    decoder_block_out_channels=[8, 8, 16, 16],
    encoder_layers_per_block=[0, 1, 1, 1],
    decoder_layers_per_block=[0, 1, 1, 1],
    encoder_qkv_multiscales=[[], [], [], []],
    decoder_qkv_multiscales=[[], [], [], []],
    downsample_block_type="pixel_unshuffle",
    upsample_block_type="pixel_shuffle",
    decoder_norm_types=["batch_norm", "batch_norm", "batch_norm", "rms_norm"],
    decoder_act_fns=["relu", "relu", "silu", "silu"],
    encoder_out_shortcut=False,
    decoder_conv_act_fn="silu",
)
CASES = {"sana-f4": (SANA, 4), "in-mix-f8": (IN_MIX, 8)}

vae_reference = DIFFUSERS_CALLS["AutoencoderDC"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_autoencoder_dc_parity(case, tmp_path):
    config, factor = CASES[case]
    rng = np.random.default_rng(0)
    sample = rng.standard_normal((2, 3, 2 * factor, 3 * factor)).astype(np.float32)
    latent = rng.standard_normal((2, 4, 2, 3)).astype(np.float32)
    inputs = {"encoder/model": {"sample": sample}, "decoder/model": {"latent_sample": latent}}
    results = check_diffusion_parity("AutoencoderDC", config, inputs, vae_reference, tmp_path)
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "sana-f4":  # --validate's sample feeds fit the hub's layout, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"encoder_block_types": "EViTS5_GLU"}, "encoder_block_types 'EViTS5_GLU'"),
        ({"decoder_norm_types": "layer_norm"}, "decoder_norm_types 'layer_norm'"),
        ({"decoder_act_fns": "relu6"}, "decoder_act_fns 'relu6'"),
        ({"upsample_block_type": "bicubic"}, "upsample_block_type 'bicubic'"),
        ({"encoder_layers_per_block": [1, 0, 1]}, "only the first stage"),
        ({"latent_channels": -4}, "latent_channels must be a positive integer"),
        ({"latent_channels": 5}, "encoder_out_shortcut: width 16 is no multiple"),
        ({"encoder_block_out_channels": [8, 24, 16]}, "8 -> 24 does not resample"),
        ({"decoder_qkv_multiscales": [[], [4], []]}, "not odd kernel sizes"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "AutoencoderDC", **SANA, **change}
    with pytest.raises(ConfigError, match=named):
        AutoencoderDCConfig.from_hf(ComponentConfig(fields))
